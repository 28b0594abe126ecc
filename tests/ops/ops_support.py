"""A live deployment to watch, and a real Prometheus to watch it with; every process stopped by its PID.

The deployment: a standby pair on loopback (each member with its own client
port, as no address can move here; a is promoted, b follows it), a journal, a
cache and an HTTP gateway on the primary, and a multi-process backbone (the
only one that exports its rings and worker restarts).  Before anything scrapes
it, it is made to count what it counts only when it happens: a malformed
datagram (``fyrehose_dropped_total``), a client the gateway refuses
(``fyrehose_gateway_refused_connections_total``) and a WebSocket upgrade from an
origin it does not allow (``fyrehose_gateway_http_responses_total{status="403"}``); and
the gateway publishes once (``fyrehose_gateway_published_total``).
"""
from __future__ import annotations

import http.client
import json
import re
import signal
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fyrehose import Client
from fyrehose.runtime.process import ChildProcess
from fyrehose.tools.watch.exposition import parse

from support import (
    EVENT_WITHIN,
    FYREHOSE,
    LOOPBACK,
    READY_WITHIN,
    BackboneProcess,
    JournalProcess,
    free_port,
    wait_until,
)

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "tools" / "prometheus" / "fyrehose-alerts.yml"
RULE_TESTS = ROOT / "tools" / "prometheus" / "fyrehose-alerts.test.yml"
SCRAPE = ROOT / "tools" / "prometheus" / "prometheus-scrape.yml"
DASHBOARD = ROOT / "tools" / "grafana" / "fyrehose.json"
GATEWAY_MAX_CLIENTS = 4
# Metrics a process exports only once what they count has happened, and which this deployment does not make happen
# (a loss at the gateway, logins refused and throttled by a gateway with --users); tests/ops/test_dashboard.py
# checks that the gateway names them so.
EVENT_ONLY = {"fyrehose_gateway_lost_total", "fyrehose_gateway_logins_refused_total",
              "fyrehose_gateway_logins_throttled_total"}
# A PromQL word that is a function, keyword or aggregation, not a metric.
METRIC_WORD = re.compile(r"\b(fyrehose_[a-z0-9_]+|up)\b")


def metric_names(expression: str) -> set[str]:
    """The metric names a PromQL expression reads (every fyrehose_* word, and ``up``)."""
    without_strings = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expression)
    return set(METRIC_WORD.findall(without_strings))


def queries() -> list[tuple[str, str]]:
    """(panel title, expression) of every query of every panel of the dashboard."""
    model = json.loads(DASHBOARD.read_text())
    return [(panel["title"], target["expr"]) for panel in model["panels"] for target in panel.get("targets", [])]


def get(url: str, timeout: float = 5.0) -> bytes:
    """The body of a GET of ``url`` from this namespace."""
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.read()


@dataclass
class MemberProcess:
    state_dir: Path
    port: int
    pair: int
    peer: int
    metrics_port: int
    child: ChildProcess | None = None

    def start(self) -> MemberProcess:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.child = ChildProcess(FYREHOSE + [
            "backbone", "--listen", f"{LOOPBACK}:{self.port}", "--state-dir", str(self.state_dir),
            "--pair", f"{LOOPBACK}:{self.pair}", "--peer", f"{LOOPBACK}:{self.peer}",
            "--metrics", f"{LOOPBACK}:{self.metrics_port}"], self.state_dir.parent / f"member-{self.port}.log")
        self.child.wait_ready(READY_WITHIN)
        return self

    @property
    def address(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    @property
    def metrics(self) -> str:
        return f"{LOOPBACK}:{self.metrics_port}"

    def role(self) -> str:
        return (self.state_dir / "role").read_text().strip()

    def stop(self) -> None:
        if self.child is not None:
            self.child.stop(10)

    def sample(self, name: str) -> float | None:
        return parse(get(f"http://{self.metrics}/metrics").decode()).total(name)


@dataclass
class Deployment:
    root: Path
    a: MemberProcess | None = None
    b: MemberProcess | None = None
    pipeline: BackboneProcess | None = None
    journal: JournalProcess | None = None
    journal_metrics: str = ""
    cache: ChildProcess | None = None
    cache_metrics: str = ""
    gateway: ChildProcess | None = None
    gateway_address: str = ""
    stops: list[Callable[[], object]] = field(default_factory=list)

    def start(self) -> Deployment:
        ports = [free_port() for _ in range(4)]
        metrics = [free_port(socket.SOCK_STREAM) for _ in range(4)]
        self.a = MemberProcess(self.root / "a", ports[0], ports[2], ports[3], metrics[0]).start()
        self.stops.append(self.a.stop)
        self.b = MemberProcess(self.root / "b", ports[1], ports[3], ports[2], metrics[1]).start()
        self.stops.append(self.b.stop)
        self.a.child.proc.send_signal(signal.SIGUSR1)
        wait_until(lambda: self.a.role() == "primary", EVENT_WITHIN, "a promoted")
        wait_until(lambda: self.a.sample("fyrehose_pair_standby_attached") == 1, EVENT_WITHIN, "b attached to a")
        self.pipeline = BackboneProcess(self.root / "pipeline", workers=1, extra=["--fanout", "1"]).start()
        self.stops.append(self.pipeline.stop)
        self.journal_metrics = f"{LOOPBACK}:{metrics[2]}"
        self.journal = JournalProcess(self.a.address, self.root / "journal", "--metrics", self.journal_metrics)
        self.journal.start()
        self.stops.append(lambda: self.journal.alive() and self.journal.stop())
        self.cache_metrics = f"{LOOPBACK}:{metrics[3]}"
        self.cache = ChildProcess(FYREHOSE + ["cache", "--backbone", self.a.address, "--metrics", self.cache_metrics],
                                  self.root / "cache.log")
        self.stops.append(lambda: self.cache.stop(10))
        self.gateway = ChildProcess(FYREHOSE + [
            "gateway", "http", "--listen", f"{LOOPBACK}:0", "--backbone", self.a.address,
            "--max-clients", str(GATEWAY_MAX_CLIENTS)], self.root / "gateway.log")
        self.stops.append(lambda: self.gateway.stop(10))
        _, port = self.gateway.wait_ready(READY_WITHIN)
        self.gateway_address = f"{LOOPBACK}:{port}"
        self.cache.wait_ready(READY_WITHIN)
        wait_until(self.journal.running, EVENT_WITHIN, "the journal reaches the backbone")
        self._count_the_rare_events()
        with Client(self.a.address) as publisher:
            for index in range(50):
                publisher.publish(b"message %d" % index)
        return self

    def _count_the_rare_events(self) -> None:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.sendto(b"\xff not a frame", (LOOPBACK, self.a.port))
        wait_until(lambda: (self.a.sample("fyrehose_dropped_total") or 0) >= 1, EVENT_WITHIN, "the malformed datagram counted")
        held = []
        try:
            for _ in range(GATEWAY_MAX_CLIENTS + 20):  # bounded: the gateway refuses once it serves its maximum
                sock = socket.create_connection(("127.0.0.1", int(self.gateway_address.rpartition(":")[2])), 5)
                held.append(sock)
                sock.settimeout(0.5 if len(held) > GATEWAY_MAX_CLIENTS else 0.01)
                try:
                    if sock.recv(100) == b"":
                        break  # refused: served nothing, closed
                except TimeoutError:
                    continue
            else:
                raise AssertionError("the gateway refused no client beyond --max-clients")
        finally:
            for sock in held:
                sock.close()
        wait_until(self._upgrade_from_elsewhere_refused, EVENT_WITHIN, "the gateway serves again and refuses the origin")
        with urllib.request.urlopen(urllib.request.Request(f"http://{self.gateway_address}/v1/publish/ops.check",
                                                           data=b"through the gateway", method="POST"),
                                    timeout=10) as response:
            assert response.status == 200

    def _upgrade_from_elsewhere_refused(self) -> bool:
        """A WebSocket upgrade from an origin the gateway does not allow; False while it still refuses clients
        (the connections held a moment ago are not all closed on its side yet)."""
        host, port = self.gateway_address.rsplit(":", 1)
        connection = http.client.HTTPConnection(host, int(port), timeout=10)
        try:
            connection.request("GET", "/resp", headers={
                "Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
                "Sec-WebSocket-Version": "13", "Origin": "http://elsewhere.example"})
            status = connection.getresponse().status
        except (http.client.RemoteDisconnected, ConnectionResetError):
            return False
        finally:
            connection.close()
        assert status == 403, status
        return True

    def endpoints(self) -> dict[str, list[str]]:
        """HOST:PORT of every metrics endpoint, by the job the kit's scrape file names."""
        return {"fyrehose-backbone": [self.a.metrics, self.b.metrics],
                "fyrehose-backbone-pipeline": [f"{LOOPBACK}:{self.pipeline.metrics_port}"],
                "fyrehose-journal": [self.journal_metrics], "fyrehose-cache": [self.cache_metrics],
                "fyrehose-gateway": [self.gateway_address]}

    def stop(self) -> None:
        """Every process this deployment started, last started first, each by its PID."""
        for stop in reversed(self.stops):
            stop()


def rule_expressions() -> dict[str, str]:
    """Each alert's expression, by name (each rule's ``expr:`` is one line of the file)."""
    text = RULES.read_text()
    names = re.findall(r"^\s+- alert: (\w+)$", text, re.M)
    expressions = re.findall(r"^\s+expr: (.+)$", text, re.M)
    assert len(names) == len(expressions), "every rule has a one-line expr"
    return dict(zip(names, expressions, strict=True))


def kit_jobs() -> list[str]:
    """The job names of the kit's scrape file."""
    return re.findall(r"^\s+- job_name: (\S+)$", SCRAPE.read_text(), re.M)


def pending_rules(root: Path, pending: str = "1s") -> Path:
    """A copy of the rules whose ``for:`` durations are ``pending``, so an alert fires within a few evaluations."""
    path = root / "rules.yml"
    path.write_text(re.sub(r"^(\s+for: ).+$", rf"\g<1>{pending}", RULES.read_text(), flags=re.M))
    return path


def prometheus_config(root: Path, endpoints: dict[str, list[str]], rules: Path) -> Path:
    """A configuration scraping and evaluating every second: one job per entry of ``endpoints``."""
    config = {  # JSON is YAML: Prometheus reads it as its configuration
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s", "scrape_timeout": "1s"},
        "rule_files": [str(rules)],
        "scrape_configs": [{"job_name": name, "static_configs": [{"targets": targets}]}
                           for name, targets in endpoints.items()],
    }
    path = root / "prometheus.yml"
    path.write_text(json.dumps(config))
    return path


def prometheus_argv(root: Path, config: Path, listen: str) -> list[str]:
    return ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={root / 'data'}",
            f"--web.listen-address={listen}"]


class PrometheusApi:
    """Prometheus's HTTP API at ``url``, read with ``fetch`` (a URL in, the body out)."""

    def __init__(self, url: str, fetch: Callable[[str], bytes] = get) -> None:
        self.url = url
        self.fetch = fetch

    def ready(self) -> bool:
        try:
            return self.fetch(f"{self.url}/-/ready").startswith(b"Prometheus Server is Ready")
        except (OSError, subprocess.CalledProcessError):
            return False

    def api(self, path: str, **params: str) -> Any:
        answer = json.loads(self.fetch(f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params)}"))
        assert answer["status"] == "success", answer
        return answer["data"]

    def query(self, expression: str) -> list:
        return self.api("query", query=expression)["result"]

    def firing(self) -> set[tuple[str, str, str]]:
        """(alert, job, instance) of every firing alert."""
        return {(alert["labels"]["alertname"], alert["labels"].get("job", ""), alert["labels"].get("instance", ""))
                for alert in self.api("alerts")["alerts"] if alert["state"] == "firing"}


class PrometheusProcess(PrometheusApi):
    """``prometheus`` on a loopback port of its own with its own data directory, scraping and evaluating every
    second, one job per entry of ``endpoints`` (the kit's job names); stopped by its PID."""

    def __init__(self, root: Path, endpoints: dict[str, list[str]], rules: Path) -> None:
        port = free_port(socket.SOCK_STREAM)
        super().__init__(f"http://{LOOPBACK}:{port}")
        self.child = ChildProcess(prometheus_argv(root, prometheus_config(root, endpoints, rules), f"{LOOPBACK}:{port}"),
                                  root / "prometheus.log")
        wait_until(self._started, 60, "prometheus ready")

    def _started(self) -> bool:
        assert self.child.alive(), self.child.output()[-2000:]
        return self.ready()

    def stop(self) -> None:
        self.child.stop(20)


def wait_firing(prometheus: PrometheusApi, alert: str, job: str, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while not any(name == alert and found_job == job for name, found_job, _ in prometheus.firing()):
        assert time.monotonic() < deadline, f"{alert} for {job} did not fire; firing: {prometheus.firing()}"
        time.sleep(0.5)
