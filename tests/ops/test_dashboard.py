"""The Grafana dashboard is a model Grafana imports, and every query in it names metrics the processes export."""
from __future__ import annotations

import json
import re
from collections import Counter
from types import SimpleNamespace

from fyrehose.gateways.drivers.http.gateway import HttpGateway
from fyrehose.tools.watch.exposition import parse

from ops_support import DASHBOARD, EVENT_ONLY, metric_names, queries


def test_the_model_is_importable_and_its_panels_have_ids_places_and_the_datasource_variable():
    model = json.loads(DASHBOARD.read_text())
    assert model["uid"] == "fyrehose" and model["title"] == "fyrehose" and model["schemaVersion"] >= 30
    assert [variable["type"] for variable in model["templating"]["list"]] == ["datasource"]
    ids = [panel["id"] for panel in model["panels"]]
    assert len(ids) == len(set(ids))
    for panel in model["panels"]:
        assert set(panel["gridPos"]) == {"h", "w", "x", "y"} and panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${datasource}" and panel["targets"], panel["title"]
    titles = {panel["title"] for panel in model["panels"] if panel["type"] == "row"}
    assert titles == {"Rates", "Latency", "Losses", "Standby pair", "Journals", "Caches", "Gateways", "Processes"}


def test_every_query_reads_fyrehose_metrics_and_braces_and_parentheses_balance():
    for title, expression in queries():
        assert metric_names(expression), f"{title}: {expression} reads no fyrehose metric"
        for opening, closing in ("()", "[]", "{}"):
            assert expression.count(opening) == expression.count(closing), f"{title}: {expression}"
        assert not re.search(r"\$(?!__rate_interval)", expression), f"{title}: unknown variable in {expression}"


def test_the_gateway_names_its_event_counters_as_the_dashboard_and_rules_read_them():
    """A loss and refused or throttled logins appear only once they happened, which the live deployment does not
    cause: the names the gateway gives those counters (gateways/drivers/router.py, gateways/access/login.py) are checked
    here instead."""
    counts = Counter({"lost": 3, "logins refused": 2, "logins throttled": 1})
    fake = SimpleNamespace(stats=counts, router=None, healthy=lambda: False, clients=None)
    exported = parse(HttpGateway.metrics_text(fake).decode())  # type: ignore[arg-type]
    assert set(exported.families) >= EVENT_ONLY
    assert exported.total("fyrehose_gateway_lost_total", {"kind": "http"}) == 3
    assert exported.total("fyrehose_gateway_logins_refused_total", {"kind": "http"}) == 2
    assert exported.total("fyrehose_gateway_logins_throttled_total", {"kind": "http"}) == 1
