"""Throw random, mutated and forged datagrams at the UDP socket of a running backbone client.

    python -m fyrehose.tools.fuzz.endpoint {sub,journal,cache,redis,nats,marlin,lumberjack,all}
        [--datagrams 1000000] [--rate 20000] [--seed 1] [--json FILE]

Every process that speaks the backbone protocol listens on a UDP port anyone
who reaches its host can send to.  For each endpoint this starts a private
single-process backbone and the endpoint (``--bind`` on a known loopback
port), then sends ``--datagrams`` datagrams to that port from stranger
sockets: random bytes, mutations, and well-formed forgeries (DELIVERs of
sequence numbers past, present and future carrying ``FORGED`` payloads,
KEEPALIVE-ACKs with a HEAD, CONFIRMs, FORWARDs).  Meanwhile a real publisher
publishes ``real-N`` messages through the backbone.  Afterwards:

- the endpoint process is still running and its memory is flat (at the end at
  most 5 % + 8 MiB above the midpoint sample);
- every real message reached where the endpoint puts it, and no forged
  payload did: ``sub``'s output, the journal's directory (read back after a
  clean SIGTERM stop), the cache's snapshot, a raw Redis/NATS/Marlin
  subscriber of the gateway, and for the Lumberjack gateway an event sent
  after the fuzzing that is acknowledged and published.

Exit status 0 when every endpoint passed.
"""
from __future__ import annotations

import argparse
import json
import random
import socket
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil

from fyrehose.protocol import codec
from fyrehose.runtime.process import FYREHOSE, ChildProcess, wait_until
from fyrehose.runtime.readiness import free_port
from fyrehose.subjects import envelope
from fyrehose.tools.fuzz.backbone import FLAT_SLACK, conclude, rss_of
from fyrehose.tools.fuzz.mutation import mutation_inputs
from fyrehose.tools.fuzz.subscribers import drain, raw_subscriber

LOOPBACK = "127.0.0.1"
ENDPOINTS = ("sub", "journal", "cache", "redis", "nats", "marlin", "lumberjack")
SUBJECT = "fuzz.real"
FORGED = b"FORGED"
SAMPLES = 10
REAL_EVERY = 2000  # fuzz datagrams between two real publishes


@dataclass
class EndpointResult:
    endpoint: str
    datagrams: int
    seconds: float
    real_published: int
    rss_start: int
    rss_middle: int = 0
    rss_end: int = 0
    alive: bool = False
    flat: bool = False
    real_seen: int = 0
    forged_seen: int = 0
    check: str = ""

    @property
    def passed(self) -> bool:
        return self.alive and self.flat and self.real_seen == self.real_published and self.forged_seen == 0


def forgeries(max_seq: int) -> list[bytes]:
    """Well-formed datagrams a stranger could send a client: each frame type it accepts from the backbone."""
    forged = envelope.encode(envelope.Envelope(SUBJECT, FORGED + b" value"))
    out = []
    for seq in (1, 2, max_seq // 2 or 1, max_seq, max_seq + 1, max_seq + 2, max_seq + 1000, codec.MAX_SEQUENCE):
        out.append(codec.encode_deliver(seq, forged))
        out.append(codec.encode_deliver(seq, FORGED + b" raw"))
    out.append(codec.pack([codec.Deliver(s, forged) for s in range(max_seq + 1, max_seq + 20)]))
    out += [
        codec.encode(codec.KeepaliveAck(token=bytes(16), head=max_seq + 500)),
        codec.encode(codec.KeepaliveAck(token=bytes(16))),
        codec.encode_confirm(1, max_seq + 3),
        codec.encode(codec.Forward(LOOPBACK, 9, 1, max_seq)),
        codec.encode(codec.Forward("203.0.113.9", 80, 1, 1 << 16)),
        b"", b"\x01", b"\x20", b"\x40", b"\x08", b"\x10" * 29,
    ]
    return out


def _port_taken(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.bind((LOOPBACK, port))
        except OSError:
            return True
        return False


class Scenario:
    """How one endpoint is started, and how what it made of the real messages is read back."""

    def __init__(self, name: str, workdir: Path, backbone: str) -> None:
        self.name = name
        self.workdir = workdir
        self.backbone = backbone
        self.udp_port = free_port(socket.SOCK_DGRAM)
        self.tcp_port = free_port(socket.SOCK_STREAM)
        self.subscriber: socket.socket | None = None
        self.received = b""

    def argv(self) -> list[str]:
        bind = ["--backbone", self.backbone, "--bind", f"{LOOPBACK}:{self.udp_port}"]
        if self.name == "sub":
            return FYREHOSE + ["sub", *bind]
        if self.name == "journal":
            return FYREHOSE + ["journal", *bind, "--dir", str(self.workdir / "journal")]
        if self.name == "cache":
            return FYREHOSE + ["cache", *bind]
        return FYREHOSE + ["gateway", self.name, "--listen", f"{LOOPBACK}:{self.tcp_port}", *bind]

    def start(self) -> ChildProcess:
        child = ChildProcess(self.argv(), self.workdir / f"{self.name}.log")
        if self.name == "sub":  # sub prints messages, not a readiness line: wait for its socket
            wait_until(lambda: _port_taken(self.udp_port) or not child.alive(), 15, "sub binding its port")
        else:
            child.wait_ready(30)
        if self.name in ("redis", "nats", "marlin"):
            self.subscriber = raw_subscriber(self.name, (LOOPBACK, self.tcp_port), SUBJECT.encode())
        return child

    def read_during(self) -> None:
        if self.subscriber is not None:
            self.received += drain(self.subscriber)

    def seen(self, child: ChildProcess, real: list[bytes], client_factory: Callable) -> tuple[int, int, str]:
        """(real messages found, forged payloads found, what was checked)."""
        if self.name == "sub":
            text = child.log.read_bytes()
            return sum(text.count(b"\t" + r + b"\n") + _enveloped_lines(text, r) for r in real), \
                text.count(FORGED), "sub's output"
        if self.name == "journal":
            child.stop()
            from fyrehose.journal.store import JournalStore
            store = JournalStore(self.workdir / "journal")
            last = store.open() or 0
            held = [data for _, data in store.held(1, last)] if last else []
            store.close()
            blob = b"\n".join(held)
            return sum(1 for r in real if r in blob), blob.count(FORGED), f"journal read back ({len(held)} records)"
        if self.name == "cache":
            with client_factory() as client:
                answer = client.snapshot(SUBJECT, timeout=5)
            value = answer.envelope.data
            return (len(real) if value == real[-1] else 0), value.count(FORGED), "the cache's snapshot"
        if self.name == "lumberjack":
            return _lumberjack_still_publishes(self.tcp_port, client_factory, len(real))
        assert self.subscriber is not None  # started for the raw-subscriber endpoints, the ones left here
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and sum(r in self.received for r in real) < len(real):
            self.received += drain(self.subscriber, 0.2)
        self.subscriber.close()
        return sum(1 for r in real if r in self.received), self.received.count(FORGED), f"raw {self.name} subscriber"


def _enveloped_lines(text: bytes, real: bytes) -> int:
    """sub prints an enveloped payload's bytes as they are; count the lines that end with it."""
    return sum(1 for line in text.splitlines() if line.endswith(real) and not line.endswith(b"\t" + real))


def _lumberjack_still_publishes(port: int, client_factory: Callable, published: int) -> tuple[int, int, str]:
    """The Lumberjack gateway only publishes: after the fuzzing one v2 event is acked and reaches the backbone."""
    from fyrehose.gateways.lumberjack.protocol import decode_acks, encode_json, encode_window

    event = json.dumps({"message": "after the fuzzing", "fuzz": True}).encode()
    with client_factory() as observer:
        stream = observer.subscribe(on_loss="yield")
        with socket.create_connection((LOOPBACK, port), timeout=10) as conn:
            conn.sendall(encode_window(1) + encode_json(1, event))
            acked = b""
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and not decode_acks(acked):
                acked += conn.recv(64)
        got = b""
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and b"after the fuzzing" not in got:
            message = stream.get(timeout=0.5)
            got += getattr(message, "data", b"") or b""
    ok = bool(decode_acks(acked)) and b"after the fuzzing" in got
    return (published if ok else 0), got.count(FORGED), "an event acked and published after the fuzzing"


def fuzz_endpoint(name: str, datagrams: int, rate: float, seed: int, log=print) -> EndpointResult:
    from fyrehose import Client

    with tempfile.TemporaryDirectory(prefix=f"fyrehose-fuzz-{name}-") as tmp:
        workdir = Path(tmp)
        port = free_port(socket.SOCK_DGRAM)
        backbone = ChildProcess(FYREHOSE + ["backbone", "--listen", f"{LOOPBACK}:{port}", "--workers", "0",
                                            "--state-dir", str(workdir / "state")], workdir / "backbone.log")
        address = f"{LOOPBACK}:{port}"
        endpoint = None
        try:
            backbone.wait_ready(30)
            scenario = Scenario(name, workdir, address)
            endpoint = scenario.start()
            handle = psutil.Process(endpoint.pid)
            time.sleep(0.5)
            result = EndpointResult(name, datagrams, 0.0, 0, rss_of(handle))
            real: list[bytes] = []
            samples: list[int] = []
            target = (LOOPBACK, scenario.udp_port)
            rng = random.Random(seed)
            with Client(address, subscribe=False) as publisher:
                strangers = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(4)]
                try:
                    for sock in strangers:
                        sock.bind((LOOPBACK, 0))
                        sock.setblocking(False)
                    seqs = [publisher.publish(b"warm-up", subject=SUBJECT)]
                    seeds = forgeries(seqs[-1])
                    every = max(1, datagrams // SAMPLES)
                    started = time.monotonic()
                    for i, data in enumerate(mutation_inputs(seeds, datagrams, seed)):
                        try:
                            rng.choice(strangers).sendto(data[:codec.MAX_DATAGRAM], target)
                        except OSError:
                            pass  # our own send buffer is full: that datagram is not sent
                        if i % REAL_EVERY == REAL_EVERY - 1:
                            payload = b"real-%d" % len(real)
                            seqs.append(publisher.publish(payload, subject=SUBJECT))
                            real.append(payload)
                            if len(seqs) % 16 == 0:  # forge around the live sequence numbers too
                                seeds[:] = forgeries(seqs[-1])
                            scenario.read_during()
                        if i % 256 == 255:
                            ahead = started + (i + 1) / rate - time.monotonic()
                            if ahead > 0:
                                time.sleep(ahead)
                        if i % every == every - 1:
                            samples.append(rss_of(handle))
                            if not endpoint.alive():
                                break
                    result.seconds = time.monotonic() - started
                    payload = b"real-%d" % len(real)
                    publisher.publish(payload, subject=SUBJECT)
                    real.append(payload)
                finally:
                    for sock in strangers:
                        sock.close()
            time.sleep(1.0)
            result.real_published = len(real)
            result.alive = endpoint.alive()
            if result.alive:
                result.rss_end = rss_of(handle)
                result.rss_middle = samples[len(samples) // 2] if samples else result.rss_start
                result.flat = result.rss_end <= result.rss_middle * 1.05 + FLAT_SLACK
                result.real_seen, result.forged_seen, result.check = scenario.seen(
                    endpoint, real, lambda: Client(address))
            log(f"{name}: {result.datagrams} datagrams in {result.seconds:.1f} s, RSS {result.rss_start >> 20} -> "
                f"{result.rss_middle >> 20} -> {result.rss_end >> 20} MiB, alive={result.alive} flat={result.flat}, "
                f"real {result.real_seen}/{result.real_published}, forged {result.forged_seen} ({result.check})")
            return result
        finally:
            if endpoint is not None:
                endpoint.stop()
            backbone.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fyrehose.tools.fuzz.endpoint",
                                     description=(__doc__ or "").split("\n")[0])
    parser.add_argument("endpoint", choices=(*ENDPOINTS, "all"))
    parser.add_argument("--datagrams", type=int, default=1_000_000, help="datagrams per endpoint (default 1000000)")
    parser.add_argument("--rate", type=float, default=20_000, help="datagrams/s sent (default 20000)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    args = parser.parse_args(argv)
    if args.datagrams < 1 or args.rate <= 0:
        parser.error("--datagrams and --rate must be positive")
    names = ENDPOINTS if args.endpoint == "all" else (args.endpoint,)
    return conclude([fuzz_endpoint(name, args.datagrams, args.rate, args.seed) for name in names], args.json)


if __name__ == "__main__":
    sys.exit(main())
