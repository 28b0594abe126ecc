"""Helpers for tests that run real processes over loopback UDP."""
from __future__ import annotations

import re
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import psutil

from fyrehose.drivers.backbone_io import wait_for_backbone
from fyrehose.loadtest.prometheus import parse_samples
from fyrehose.protocol.pacing import TokenBucket
from fyrehose.runtime import process, readiness
from fyrehose.runtime.process import ChildProcess
from fyrehose.runtime.readiness import READY_LINE

LOOPBACK = "127.0.0.1"
T = TypeVar("T")
FYREHOSE = [sys.executable, "-m", "fyrehose.commands.main"]

# Upper bounds, never measurements: CI is a busy 2-core machine where a process can wait seconds for a core, and a
# bound that passes a test in the normal case costs nothing, so it is set far above any normal run.  A wait that
# runs out is a failure; what must NOT happen is checked over a short observation window of its own instead.
READY_WITHIN = 120.0  # seconds a started process gets to print its readiness line
EVENT_WITHIN = 60.0  # seconds an awaited event (a message arriving, a counter reaching a value) gets to happen


def wait_until(condition: Callable[[], T], timeout: float = EVENT_WITHIN, what: str = "the awaited condition",
               interval: float = process.POLL) -> T:
    """``fyrehose.runtime.process.wait_until`` with the tests' generous bound for an awaited event as default."""
    return process.wait_until(condition, timeout, what, interval)


def free_port(kind: int = socket.SOCK_DGRAM) -> int:
    """A port free for both UDP and TCP right now (the backbone uses UDP, metrics TCP)."""
    for _ in range(50):
        port = readiness.free_port(kind)
        other = socket.SOCK_STREAM if kind == socket.SOCK_DGRAM else socket.SOCK_DGRAM
        with socket.socket(socket.AF_INET, other) as check:
            try:
                check.bind((LOOPBACK, port))
            except OSError:
                continue
        return port
    raise RuntimeError("no free port found")


@dataclass
class BackboneProcess:
    """A ``fyrehose backbone`` subprocess; ``stop``/``kill`` act on its PID."""

    state_dir: Path
    workers: int = 0
    extra: list[str] = field(default_factory=list)
    prefix: list[str] = field(default_factory=list)  # e.g. ``ip netns exec NAME``
    port: int = 0
    metrics_port: int = 0
    child: ChildProcess | None = None
    log: Path | None = None

    @property
    def proc(self) -> subprocess.Popen | None:
        return self.child.proc if self.child is not None else None

    @property
    def addr(self) -> tuple[str, int]:
        return LOOPBACK, self.port

    @property
    def address(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    def start(self) -> BackboneProcess:
        if not self.port:
            self.port = free_port()
        if not self.metrics_port:
            self.metrics_port = free_port(socket.SOCK_STREAM)
        self.log = self.state_dir.parent / f"backbone-{self.port}.log"
        args = self.prefix + FYREHOSE + [
            "backbone", "--listen", self.address, "--workers", str(self.workers),
            "--state-dir", str(self.state_dir), "--metrics", f"{LOOPBACK}:{self.metrics_port}",
        ] + self.extra
        self.child = ChildProcess(args, self.log)
        self.child.wait_ready(READY_WITHIN)
        wait_for_backbone(self.addr, EVENT_WITHIN)  # and its workers answer (multi-process mode)
        return self

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGTERM and wait: a clean shutdown (SIGKILL after ``timeout`` s)."""
        return self.child.stop(timeout) if self.child is not None else 0

    def kill(self) -> None:
        """SIGKILL (kill -9) and reap."""
        if self.child is not None:
            self.child.kill()

    def metrics(self) -> dict[str, float]:
        """The Prometheus samples as {'name{labels}': value}."""
        url = f"http://{LOOPBACK}:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as response:
            return parse_samples(response.read().decode())

    def metric(self, name: str, default: float = 0.0) -> float:
        return self.metrics().get(name, default)


class LossyRelay:
    """A UDP relay between one client and the backbone that drops every Nth datagram towards the client.

    The client talks to the relay as if it were the backbone; the backbone sees
    the relay's address as the client's, so DELIVERs, ACKs and re-DELIVERs from
    other clients all pass through it on their way back.
    """

    def __init__(self, backbone: tuple[str, int], drop_every: int) -> None:
        self.backbone = backbone
        self.drop_every = drop_every
        self.front = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)  # faces the client
        self.front.bind((LOOPBACK, 0))
        self.back = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)  # faces the backbone and other clients
        self.back.bind((LOOPBACK, 0))
        for sock in (self.front, self.back):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
            sock.settimeout(0.1)
        self.addr = self.front.getsockname()
        self.client: tuple[str, int] | None = None
        self.passed = 0
        self.dropped = 0
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._upstream, daemon=True),
            threading.Thread(target=self._downstream, daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def _upstream(self) -> None:
        while not self._stop.is_set():
            try:
                data, source = self.front.recvfrom(65536)
            except (TimeoutError, OSError):
                continue
            self.client = source
            self.back.sendto(data, self.backbone)

    def _downstream(self) -> None:
        count = 0
        while not self._stop.is_set():
            try:
                data, _ = self.back.recvfrom(65536)
            except (TimeoutError, OSError):
                continue
            count += 1
            if data[0] == 0x01 and count % self.drop_every == 0:
                self.dropped += 1
                continue
            if self.client is not None:
                self.front.sendto(data, self.client)
                self.passed += 1

    def close(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(2)
        self.front.close()
        self.back.close()


def workers_of(backbone) -> dict[str, psutil.Process]:
    """The backbone's worker processes by name (a worker forked a moment ago may not be named yet)."""
    found = {}
    for child in psutil.Process(backbone.proc.pid).children():
        try:
            found[child.name()] = child
        except psutil.NoSuchProcess:
            continue
    return found


def take(stream, count: int, timeout: float = EVENT_WITHIN) -> list:
    """Up to ``count`` events of a subscription within ``timeout`` seconds (fewer when they do not come)."""
    got: list = []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        event = stream.get(timeout=max(0.01, deadline - time.monotonic()))
        if event is not None:
            got.append(event)
    return got


def take_until(stream, wanted, timeout=EVENT_WITHIN):
    """The first event of ``stream`` for which ``wanted`` is true, within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        event = stream.get(timeout=max(0.0, deadline - time.monotonic()))
        if event is not None and wanted(event):
            return event
    raise AssertionError(f"nothing wanted arrived within {timeout} s")


def run_cli(*args: str, input: bytes | None = None, timeout: float = 30.0) -> subprocess.CompletedProcess:
    return subprocess.run(FYREHOSE + list(args), input=input, capture_output=True, timeout=timeout)


class JournalProcess:
    """A ``fyrehose journal`` on one directory, started (and restarted) with one log; stopped by its PID."""

    def __init__(self, backbone: str, directory: Path, *extra: str, log: Path | None = None) -> None:
        self.args = FYREHOSE + ["journal", "--backbone", backbone, "--dir", str(directory), *extra]
        self.directory = directory
        self.log = log or directory.parent / f"{directory.name}.log"  # another place when that disk may fill
        self.child: ChildProcess | None = None
        self.starts = 0

    def start(self) -> JournalProcess:
        self.child = ChildProcess(self.args, self.log)
        self.starts += 1
        return self

    def alive(self) -> bool:
        return self.child is not None and self.child.alive()

    def running(self) -> bool:
        """True once the latest start has printed its readiness line (it reached the backbone)."""
        ready = READY_LINE.findall(self.log.read_text()) if self.log.exists() else []
        return self.alive() and len(ready) >= self.starts

    def stop(self) -> int | None:
        """SIGTERM and wait: a clean stop (SIGKILL after 30 s)."""
        return self.child.stop(30)

    def kill(self) -> None:
        """SIGKILL (kill -9) and reap."""
        if self.child is not None:
            self.child.kill()

    def forwarded(self) -> int:
        """Messages re-DELIVERed in all runs so far, from the journal's exit lines."""
        return sum(int(n) for n in re.findall(r"forwarded (\d+)", self.log.read_text()))


class CacheProcess:
    """A ``fyrehose cache`` subprocess, awaited by its readiness line and stopped by its PID."""

    def __init__(self, backbone, tmp_path, *extra: str) -> None:
        self.log = tmp_path / f"cache-{time.monotonic_ns()}.log"
        self.args = FYREHOSE + ["cache", "--backbone", backbone.address, *extra]
        self.child: ChildProcess | None = None

    def __enter__(self) -> CacheProcess:
        self.child = ChildProcess(self.args, self.log)
        self.child.wait_ready(READY_WITHIN)
        return self

    def __exit__(self, *exc: object) -> None:
        self.child.stop(10)

    def summary(self) -> dict[str, int]:
        """The counters of the line the cache prints when it stops."""
        last = self.log.read_text().strip().splitlines()[-1]
        return {name: int(value) for name, _, value in (item.partition("=") for item in last.split("; ")[1].split())}


def last_written(directory: Path) -> int:
    """The highest sequence a journal directory holds on disk or in its gap index (0: none yet)."""
    from fyrehose.journal.gapindex import FILE_NAME as GAPS_FILE
    from fyrehose.journal.gapindex import parse_gaps
    from fyrehose.journal.reader import FileScan, list_segments

    segments, _ = list_segments(directory)
    last = 0
    if segments:
        for _, record in FileScan(segments[-1].path):
            last = record.seq
    gaps_path = directory / GAPS_FILE
    if gaps_path.exists():
        gaps, _, _ = parse_gaps(gaps_path.read_bytes())
        last = max([last] + [g.to_seq for g in gaps])
    return last


def journaling(publisher, *journals: JournalProcess) -> int:
    """Publish probes until every journal has written one (it is subscribed); the last probe's sequence."""
    deadline = time.monotonic() + EVENT_WITHIN
    seq = publisher.publish(b"probe")
    while not all(last_written(j.directory) >= seq for j in journals):
        assert time.monotonic() < deadline, ["journals did not start journaling"] + [j.log.read_text() for j in journals]
        assert all(j.alive() for j in journals), [j.log.read_text() for j in journals]
        time.sleep(0.1)
        seq = publisher.publish(b"probe")
    wait_until(lambda: all(last_written(j.directory) >= seq for j in journals), EVENT_WITHIN, "the last probe")
    return seq


async def nats_flushed(client) -> None:
    """Wait until the server has taken everything a nats-py ``client`` sent, the SUBs it just made included.

    nats-py's ``flush()`` writes its PING straight to the socket, ahead of
    commands still in its buffer (a SUB just made), so that PONG alone proves
    nothing about them; by the time it comes back the buffer has been written,
    so a second PING follows them.
    """
    await client.flush()
    await client.flush()


class WatchedBucket(TokenBucket):
    """A token bucket that records what it answered (each 0 lets one re-DELIVER go): put in place of a
    forwarder's own with monkeypatch, it shows the pacing without timing anything."""

    made: list[WatchedBucket] = []

    def __init__(self, rate: float, burst: int, now: float) -> None:
        super().__init__(rate, burst, now)
        self.answers: list[float] = []
        WatchedBucket.made.append(self)

    def wait_time(self, now: float) -> float:
        self.answers.append(super().wait_time(now))
        return self.answers[-1]


def make_certificates(directory: Path, clients: tuple[str, ...], san: str = "IP:127.0.0.1") -> dict[str, str]:
    """A CA (``ca.pem``), a server certificate for ``san`` (``server.pem``/``.key``) and one client certificate per
    name, whose subject's CN is the name (``NAME.pem``/``.key``), made with the openssl command; path by file name."""
    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=directory, check=True, capture_output=True, timeout=60)

    key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    openssl("req", "-x509", *key, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=test CA")
    (directory / "server.ext").write_text(f"subjectAltName={san}\n")
    for name in ("server", *clients):
        openssl("req", *key, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}")
        extension = ["-extfile", "server.ext"] if name == "server" else []
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
                "-out", f"{name}.pem", "-days", "2", *extension)
    return {file.name: str(file) for file in directory.iterdir() if file.suffix in (".pem", ".key")}
