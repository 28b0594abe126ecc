"""A real Prometheus (Debian's) on loopback scrapes a live deployment with the kit's rules: every target is
scraped, every metric the rules, the dashboard and the docs name is exported, every dashboard query answers, and
a stopped journal and a killed standby make their alerts fire.

The rules are a copy whose ``for:`` is 1 s, and Prometheus scrapes and evaluates every second, so each alert
fires a few seconds after its fault; the waits are upper bounds of 90 s.
"""
from __future__ import annotations

import re
import time

import pytest

from ops_support import (
    EVENT_ONLY,
    ROOT,
    Deployment,
    PrometheusProcess,
    metric_names,
    pending_rules,
    queries,
    rule_expressions,
    wait_firing,
)

# Words of the docs that are no metrics: keepalived's name for its check of the backbone (vrrp_script), the users
# file's format marker.
NOT_METRICS = {"fyrehose_backbone", "fyrehose_users"}


@pytest.fixture(scope="module")
def watched(tmp_path_factory):
    root = tmp_path_factory.mktemp("watched")
    deployment = Deployment(root)
    prometheus = None
    try:
        deployment.start()
        prometheus = PrometheusProcess(root, deployment.endpoints(), pending_rules(root))
        yield deployment, prometheus
    finally:
        if prometheus is not None:
            prometheus.stop()
        deployment.stop()


def wait_scraped(prometheus: PrometheusProcess, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        targets = prometheus.api("targets")["activeTargets"]
        if targets and all(target["health"] == "up" for target in targets):
            return
        assert time.monotonic() < deadline, [(t["scrapeUrl"], t["health"], t["lastError"]) for t in targets]
        time.sleep(0.5)


def test_every_metric_the_rules_and_the_dashboard_read_is_exported_and_scraped(watched):
    deployment, prometheus = watched
    wait_scraped(prometheus)
    assert len(prometheus.api("targets")["activeTargets"]) == 6
    read = set().union(*(metric_names(expression) for expression in rule_expressions().values()),
                       *(metric_names(expression) for _, expression in queries()))
    deadline = time.monotonic() + 60
    while missing := read - EVENT_ONLY - set(prometheus.api("label/__name__/values")):
        assert time.monotonic() < deadline, f"read by the rules or the dashboard, exported by no process: {missing}"
        time.sleep(0.5)
    jobs = {series["job"] for series in prometheus.api("series", **{"match[]": "fyrehose_pushes_total"})}
    assert jobs == {"fyrehose-backbone", "fyrehose-backbone-pipeline"}


def test_every_metric_the_docs_name_is_exported(watched):
    """docs/operations.md tells operators what to watch by name: those names are the ones the processes export."""
    _, prometheus = watched
    wait_scraped(prometheus)
    named = set()
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        named |= set(re.findall(r"\bfyrehose_[a-z0-9_]*[a-z0-9]\b", page.read_text()))
    named -= NOT_METRICS
    deadline = time.monotonic() + 60
    while missing := named - EVENT_ONLY - set(prometheus.api("label/__name__/values")):
        assert time.monotonic() < deadline, f"named in the docs, exported by no process: {sorted(missing)}"
        time.sleep(0.5)


def test_every_dashboard_query_answers_with_data_no_dead_panels(watched):
    _, prometheus = watched
    wait_scraped(prometheus)
    for title, expression in queries():
        if metric_names(expression) <= EVENT_ONLY:
            continue
        deadline = time.monotonic() + 60
        while not prometheus.query(expression.replace("$__rate_interval", "10s")):
            assert time.monotonic() < deadline, f"panel {title!r}: {expression} has no data"
            time.sleep(0.5)


def test_every_rule_is_loaded_and_evaluates_without_error(watched):
    _, prometheus = watched
    deadline = time.monotonic() + 60
    while True:
        rules = [rule for group in prometheus.api("rules")["groups"] for rule in group["rules"]]
        if rules and all(rule.get("lastEvaluation", "").startswith("2") and rule["health"] == "ok" for rule in rules):
            break
        assert time.monotonic() < deadline, [(r["name"], r["health"], r.get("lastError")) for r in rules]
        time.sleep(0.5)
    assert {rule["name"] for rule in rules} == set(rule_expressions())


def test_a_stopped_journal_and_a_killed_standby_make_their_alerts_fire(watched):
    deployment, prometheus = watched
    wait_scraped(prometheus)
    firing = prometheus.firing()
    assert not {alert for alert in firing if alert[0] in ("FyrehoseTargetDown", "FyrehoseStandbyDetached")}, firing
    deployment.journal.stop()
    wait_firing(prometheus, "FyrehoseTargetDown", "fyrehose-journal")
    deployment.b.child.kill()
    wait_firing(prometheus, "FyrehoseStandbyDetached", "fyrehose-backbone")
    wait_firing(prometheus, "FyrehoseTargetDown", "fyrehose-backbone")
    assert ("FyrehoseStandbyDetached", "fyrehose-backbone", deployment.a.metrics) in prometheus.firing()
