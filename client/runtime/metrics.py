"""Prometheus text exposition of the backbone's counters, served over HTTP from a side thread."""
from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING

from fyrehose.protocol.codec import Address

if TYPE_CHECKING:
    import psutil  # imported where it is used: only the backbone's process metrics need it

# (name, type, help, samples) where samples are ({label: value}, number)
Metric = tuple[str, str, str, Sequence[tuple[Mapping[str, str], float]]]


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def render(metrics: Iterable[Metric]) -> str:
    lines = []
    for name, kind, help_text, samples in metrics:
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} {kind}")
        for labels, value in samples:
            label_text = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(labels.items()))
            lines.append(f"{name}{{{label_text}}} {value}" if label_text else f"{name} {value}")
    return "\n".join(lines) + "\n"


class MetricsServer:
    """Serves ``GET /metrics``; ``collect`` is called per scrape and must be thread-safe."""

    def __init__(self, addr: Address, collect: Callable[[], Iterable[Metric]]) -> None:
        collect_metrics = collect

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server naming)
                if self.path.split("?")[0] not in ("/metrics", "/"):
                    self.send_error(404)
                    return
                body = render(collect_metrics()).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(addr, Handler)
        self._server.daemon_threads = True
        # bound, the server's address is its socket's getsockname(): a str host for this IPv4 server; typeshed
        # types the attribute as what the constructor accepts, bytes hosts included
        self.address: Address = self._server.server_address  # type: ignore[assignment]
        self._thread = threading.Thread(target=self._server.serve_forever, name="metrics", daemon=True)

    def start(self) -> MetricsServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def close_listener(self) -> None:
        """Close this process's copy of the listening socket (in a forked worker; the parent keeps serving)."""
        self._server.socket.close()


_COUNTERS = {
    "pushes": ("fyrehose_pushes_total", "PUSH frames sequenced"),
    "delivered": ("fyrehose_delivered_total", "DELIVER frames sent (messages times subscribers)"),
    "datagrams out": ("fyrehose_datagrams_out_total", "datagrams sent by the backbone"),
    "keepalives": ("fyrehose_keepalives_total", "KEEPALIVEs accepted (each answered with an ACK)"),
    "requests": ("fyrehose_requests_total", "REQUESTs accepted"),
    "forwards": ("fyrehose_forwards_total", "FORWARDs sent to journaling clients"),
    "confirms": ("fyrehose_confirms_total", "CONFIRMs sent"),
    "duplicate pushes": ("fyrehose_duplicate_pushes_total", "retried PUSHes confirmed again, not sequenced twice"),
    "redelivery requests": ("fyrehose_redelivery_requests_total",
                            "REQUESTs the backbone answered from its own recent log (no journaling client, or "
                            "the same hole asked again)"),
    "redelivered": ("fyrehose_redelivered_total", "DELIVER frames re-sent from the backbone's recent log"),
    "multicast datagrams": ("fyrehose_multicast_datagrams_total",
                            "DELIVER datagrams sent once to the multicast group (--multicast)"),
    "pair records": ("fyrehose_pair_records_total", "RECORD datagrams the primary sent to its standby"),
    "pair replayed": ("fyrehose_pair_replayed_total", "RECORD datagrams sent again on the standby's REPLAY"),
    "replicated": ("fyrehose_pair_replicated_total", "messages the standby took from its primary"),
    "pair takeovers": ("fyrehose_pair_takeovers_total", "times this backbone was promoted to primary"),
    "pair fenced": ("fyrehose_pair_fenced_total", "times this primary met a newer primary and stood down"),
    "pair promotions refused": ("fyrehose_pair_promotions_refused_total",
                                "promotions refused while a primary that does not wait for this standby was alive"),
    "pair standby detached": ("fyrehose_pair_standby_detached_total",
                              "times the primary went on alone after its standby fell silent"),
    "recovered": ("fyrehose_pair_recovered_total", "messages a promoted standby got back from journaling clients"),
    "gone": ("fyrehose_pair_gone_total", "numbers a promoted standby found nobody holds (reported lost)"),
    "gone answers": ("fyrehose_gone_answers_total", "GONE frames sent in answer to REQUESTs"),
    "cookies": ("fyrehose_cookies_total",
                "COOKIE answers sent to addresses not validated yet (--validate-addresses)"),
}


def counter_metrics(counters: dict[str, int]) -> list[Metric]:
    """The backbone's event counters as Prometheus counters; ``drop:REASON`` keys become one labelled family."""
    metrics: list[Metric] = []
    for key, (name, help_text) in _COUNTERS.items():
        metrics.append((name, "counter", help_text, [({}, counters.get(key, 0))]))
    drops = [({"reason": key[5:]}, value) for key, value in sorted(counters.items()) if key.startswith("drop:")]
    metrics.append(("fyrehose_dropped_total", "counter", "datagrams or frames dropped, by reason", drops))
    return metrics


def process_metrics(processes: dict[str, psutil.Process]) -> list[Metric]:
    """CPU seconds and resident memory of each named backbone process.

    The process serving the metrics reads its own CPU from its clock, to the
    nanosecond: between two scrapes at a low rate it may spend less than one
    of the 10 ms ticks that the other processes' CPU (from /proc) is counted in.
    """
    import psutil

    cpu, rss = [], []
    for role, proc in processes.items():
        try:
            with proc.oneshot():
                if proc.pid == os.getpid():
                    cpu.append(({"process": role}, time.process_time()))
                else:
                    times = proc.cpu_times()
                    cpu.append(({"process": role}, times.user + times.system))
                rss.append(({"process": role}, proc.memory_info().rss))
        except psutil.Error:
            continue
    return [
        ("fyrehose_process_cpu_seconds_total", "counter", "CPU time of each backbone process", cpu),
        ("fyrehose_process_resident_bytes", "gauge", "resident memory of each backbone process", rss),
    ]


def client_metrics(counts: dict[str, int], last_sequence: int) -> list[Metric]:
    """Gauges of the client table (see ClientTable.counts) and the sequence counter."""
    return [
        ("fyrehose_subscribers", "gauge", "live subscribers",
         [({"batch": "no"}, counts["plain subscribers"]), ({"batch": "yes"}, counts["batch subscribers"])]),
        ("fyrehose_multicast_subscribers", "gauge", "live subscribers that take DELIVERs from the multicast group",
         [({}, counts.get("multicast subscribers", 0))]),
        ("fyrehose_journaling_clients", "gauge", "live clients that serve FORWARDs", [({}, counts["journalers"])]),
        ("fyrehose_clients", "gauge", "live clients (any flags)", [({}, counts["clients"])]),
        ("fyrehose_last_sequence", "gauge", "last sequence number issued", [({}, last_sequence)]),
    ]


def pair_metrics(values: dict[str, float]) -> list[Metric]:
    """Gauges of a standby pair member (docs/operations.md, "A hot standby pair")."""
    helps = {
        "role_primary": "1 while this backbone is its pair's primary, 0 while standby",
        "epoch": "the pair epoch this backbone serves or follows",
        "standby_attached": "1 while the primary's standby is attached (grants and, in sync mode, gates output)",
        "replication_lag_messages": "sequences issued that the standby does not hold yet",
        "replication_lag_seconds": "seconds since the standby last answered (primary) or the primary was last "
                                   "heard (standby); -1 when there is no peer",
    }
    return [(f"fyrehose_pair_{name}", "gauge", help_text, [({}, values[name])])
            for name, help_text in helps.items() if name in values]


def ring_metrics(fills: dict[str, float]) -> list[Metric]:
    """How full each shared-memory ring of the multi-process backbone is (0 to 1)."""
    return [("fyrehose_ring_fill_ratio", "gauge",
             "fraction of each shared-memory ring in use (receiver-N: towards the sequencer; log: towards fan-out)",
             [({"ring": name}, round(fill, 6)) for name, fill in fills.items()])]


def restart_metrics(restarts: dict[str, int]) -> list[Metric]:
    """Worker processes the supervisor had to start again after they died."""
    return [("fyrehose_worker_restarts_total", "counter", "worker processes restarted after they died",
             [({"worker": name}, count) for name, count in restarts.items()])]
