"""Throw random and mutated datagrams at a running backbone, then prove it still works.

    python -m fyrehose.tools.fuzz.backbone [--datagrams 1000000] [--modes 0,2] [--rate 50000] [--json FILE]

For each mode (``--workers`` value) it starts a fresh backbone on a free
loopback port, sends ``--datagrams`` datagrams from ``--sources`` sockets at
``--rate`` datagrams/s (one in ten random bytes, the rest mutations of valid
PUSH, packed PUSH, KEEPALIVE, legacy KEEPALIVE, REQUEST and of frame types only
the backbone sends), samples the resident memory of the backbone and its
workers as it goes, and at the end publishes through a real
:class:`fyrehose.Client` and checks a subscriber gets every message in order.

A mode passes when the backbone never exited, its memory is flat (at the end
at most 5 % + 8 MiB above the midpoint, by when every bounded table could have
filled), and it still delivers.  Exit status 0 when every mode passed.
"""
from __future__ import annotations

import argparse
import json
import random
import socket
import sys
import tempfile
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psutil

from fyrehose.drivers.backbone_io import wait_for_backbone
from fyrehose.protocol import codec
from fyrehose.runtime.process import FYREHOSE, ChildProcess
from fyrehose.runtime.readiness import free_port
from fyrehose.tools.fuzz.mutation import mutation_inputs

LOOPBACK = "127.0.0.1"
SAMPLES = 10
FLAT_SLACK = 8 << 20  # memory is flat when the end is at most 5 % + this above the midpoint (every fuzzer)


@dataclass
class ModeResult:
    workers: int
    datagrams: int
    seconds: float
    rss_start: int  # bytes, after start-up
    rss_samples: list[int] = field(default_factory=list)
    rss_end: int = 0
    alive: bool = False
    flat: bool = False
    delivering: bool = False
    counters: dict[str, float] = field(default_factory=dict)  # accepted and dropped, by kind and reason

    @property
    def passed(self) -> bool:
        return self.alive and self.flat and self.delivering


def seeds(sources: list[tuple[str, int]]) -> list[bytes]:
    """Valid datagrams of every kind, some naming the senders' own addresses (so they are accepted)."""
    out = [
        codec.encode_push(b"fuzz", 0),
        codec.encode_push(b"tagged", 99),
        codec.pack([codec.Push(b"a" * 10, 1), codec.Push(b"b" * 30, 2), codec.Push(b"", 0)]),
        codec.pack([codec.Push(b"x" * 100, 0)] * 8),
        codec.encode(codec.Keepalive(flags=codec.FLAG_BATCH | codec.FLAG_NOSUBSCRIBE, token=bytes(16))),
        codec.encode(codec.Keepalive(flags=codec.FLAG_HEAD | codec.FLAG_NOSUBSCRIBE | codec.FLAG_NOJOURNAL,
                                     token=bytes(range(16)))),
        codec.encode(codec.Keepalive("0.0.0.0", 0, legacy=True)),
        codec.encode(codec.Request("0.0.0.0", 0, 1, 50)),
        codec.encode(codec.Request("203.0.113.1", 80, 1, 1 << 40)),
        codec.encode_deliver(1, b"not from a client"),
        codec.encode(codec.Forward("127.0.0.1", 1, 1, 2)),
        codec.encode_confirm(1, 1),
    ]
    out += [codec.encode(codec.Keepalive(host, port, codec.FLAG_NOSUBSCRIBE, bytes(16))) for host, port in sources[:2]]
    return out


def rss_of(proc: psutil.Process) -> int:
    """Resident memory of a process and all its children (a multi-process backbone has several)."""
    total = 0
    for p in [proc] + proc.children(recursive=True):
        try:
            total += p.memory_info().rss
        except psutil.NoSuchProcess:
            continue
    return total


_ACCEPTED = ("pushes", "keepalives", "requests", "forwards")


def _counters(metrics_port: int) -> dict[str, float]:
    """What the backbone accepted (``pushes``, ...) and dropped (``drop:REASON``), from its metrics."""
    with urllib.request.urlopen(f"http://{LOOPBACK}:{metrics_port}/metrics", timeout=5) as response:
        text = response.read().decode()
    counters = {}
    for line in text.splitlines():
        name, _, value = line.rpartition(" ")
        if name.startswith('fyrehose_dropped_total{reason="'):
            counters["drop:" + name[len('fyrehose_dropped_total{reason="'):-2]] = float(value)
        elif name.removeprefix("fyrehose_").removesuffix("_total") in _ACCEPTED:
            counters[name.removeprefix("fyrehose_").removesuffix("_total")] = float(value)
    return counters


def still_delivers(addr: tuple[str, int], count: int = 100) -> bool:
    """A real publisher and subscriber: every message arrives, once, in order."""
    from fyrehose import Client
    from fyrehose.protocol.tracker import Message

    with Client(addr) as sub, Client(addr, subscribe=False) as pub:
        stream = sub.subscribe()
        seqs = pub.publish_many([b"after fuzz %d" % i for i in range(count)])
        got: list[Message] = []
        deadline = time.monotonic() + 15
        while len(got) < count and time.monotonic() < deadline:
            event = stream.get(timeout=max(0.01, deadline - time.monotonic()))
            if isinstance(event, Message) and event.seq >= seqs[0]:  # not a Lost (nor None: the time ran out)
                got.append(event)
        return [e.seq for e in got] == seqs and [e.data for e in got] == [b"after fuzz %d" % i for i in range(count)]


def fuzz_mode(workers: int, datagrams: int, rate: float, sources: int, seed: int, log=print) -> ModeResult:
    port, metrics_port = free_port(socket.SOCK_DGRAM), free_port(socket.SOCK_STREAM)
    addr = (LOOPBACK, port)
    with tempfile.TemporaryDirectory(prefix="fyrehose-fuzz-") as state:
        command = FYREHOSE + ["backbone", "--listen", f"{LOOPBACK}:{port}", "--workers", str(workers),
                              "--state-dir", f"{state}/state", "--metrics", f"{LOOPBACK}:{metrics_port}"]
        backbone = ChildProcess(command, Path(state) / "backbone.log")
        try:
            backbone.wait_ready(15)
            wait_for_backbone(addr, timeout=15.0)  # and its workers answer
            handle = psutil.Process(backbone.pid)
            time.sleep(0.5)  # workers forked and settled
            result = ModeResult(workers, datagrams, 0.0, rss_of(handle))
            socks = []
            for _ in range(sources):
                sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                sock.bind((LOOPBACK, 0))
                sock.setblocking(False)
                socks.append(sock)
            try:
                valid = seeds([s.getsockname() for s in socks])
                rng = random.Random(seed)
                every = max(1, datagrams // SAMPLES)
                started = time.monotonic()
                for i, data in enumerate(mutation_inputs(valid, datagrams, seed)):
                    if len(data) > codec.MAX_DATAGRAM:
                        data = data[:codec.MAX_DATAGRAM]
                    try:
                        rng.choice(socks).sendto(data, addr)
                    except (BlockingIOError, OSError):
                        pass  # our own send buffer is full: the datagram is simply not sent
                    if i % 256 == 255:
                        ahead = started + (i + 1) / rate - time.monotonic()
                        if ahead > 0:
                            time.sleep(ahead)
                    if i % every == every - 1:
                        result.rss_samples.append(rss_of(handle))
                        if not backbone.alive():
                            break
                result.seconds = time.monotonic() - started
            finally:
                for sock in socks:
                    sock.close()
            time.sleep(1.0)
            result.alive = backbone.alive()
            if result.alive:
                result.rss_end = rss_of(handle)
                middle = result.rss_samples[len(result.rss_samples) // 2] if result.rss_samples else result.rss_start
                result.flat = result.rss_end <= middle * 1.05 + FLAT_SLACK
                result.counters = _counters(metrics_port)
                result.delivering = still_delivers(addr)
            log(f"workers={workers}: {datagrams} datagrams in {result.seconds:.1f} s, RSS "
                f"{result.rss_start >> 20} -> {max(result.rss_samples or [0]) >> 20} (peak) -> "
                f"{result.rss_end >> 20} MiB, alive={result.alive} flat={result.flat} "
                f"delivering={result.delivering}; backbone counted "
                + ", ".join(f"{k} {v:.0f}" for k, v in sorted(result.counters.items())))
            return result
        finally:
            backbone.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fyrehose.tools.fuzz.backbone", description=__doc__.split("\n")[0])
    parser.add_argument("--datagrams", type=int, default=1_000_000, help="datagrams per mode (default 1000000)")
    parser.add_argument("--modes", default="0,2", help="comma-separated --workers values (default 0,2)")
    parser.add_argument("--rate", type=float, default=50_000, help="datagrams/s sent (default 50000)")
    parser.add_argument("--sources", type=int, default=16, help="sending sockets (default 16)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    args = parser.parse_args(argv)
    if args.datagrams < 1 or args.rate <= 0 or args.sources < 1:
        parser.error("--datagrams, --rate and --sources must be positive")
    try:
        modes = [int(m) for m in args.modes.split(",")]
    except ValueError:
        parser.error(f"--modes takes comma-separated numbers, got {args.modes!r}")
    return conclude([fuzz_mode(m, args.datagrams, args.rate, args.sources, args.seed) for m in modes], args.json)


def conclude(results: list, json_path: str | None) -> int:
    """Write the results (dataclasses with ``passed``) as JSON if asked; exit status 0 when all passed."""
    if json_path:
        with open(json_path, "w") as file:
            json.dump([asdict(r) | {"passed": r.passed} for r in results], file, indent=2)
    return 0 if all(r.passed for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
