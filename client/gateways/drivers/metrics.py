"""A gateway's counters and state in the Prometheus text format: ``--metrics HOST:PORT`` on every gateway kind, and
the HTTP gateway's own ``/metrics``.

Every event counter of the gateway's ``stats`` (connections, refusals of every kind, logins accepted, refused and
throttled, publishes and subscriptions refused, slow consumers, ...) becomes ``fyrehose_gateway_<name>_total``
labelled with the gateway's kind; ``http NNN`` counters become one family of HTTP responses by status.
"""
from __future__ import annotations

from collections.abc import Mapping

from fyrehose.runtime.metrics import Metric


def gateway_metrics(kind: str, stats: Mapping[str, int], up: bool, position: int,
                    clients: int | None = None) -> list[Metric]:
    labels = {"kind": kind}
    metrics: list[Metric] = [
        ("fyrehose_gateway_up", "gauge", "1 while the backbone answers the gateway's keepalives",
         [(labels, 1 if up else 0)]),
        ("fyrehose_gateway_position", "gauge", "the last backbone sequence the gateway routed", [(labels, position)]),
    ]
    if clients is not None:
        metrics.append(("fyrehose_gateway_clients", "gauge", "clients connected now", [(labels, clients)]))
    responses = []
    for name, count in sorted(stats.items()):
        if name.startswith("http ") and name[5:].isdigit():
            responses.append(({**labels, "status": name[5:]}, count))
            continue
        metric = "fyrehose_gateway_" + "".join(c if c.isalnum() else "_" for c in name) + "_total"
        metrics.append((metric, "counter", f"gateway counter: {name}", [(labels, count)]))
    if responses:
        metrics.append(("fyrehose_gateway_http_responses_total", "counter", "HTTP responses by status", responses))
    return metrics
