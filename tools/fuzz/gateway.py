"""Attack a TCP gateway as a hostile client would; it must go on serving honest clients, with flat memory.

    python -m fyrehose.tools.fuzz gateway {redis,nats,marlin,lumberjack,all}
        [--inputs 1000000] [--seed 1] [--json FILE]

For each kind this starts a private single-process backbone and the gateway
(with ``--max-clients 64`` so the connection flood reaches the limit), keeps
two honest connections open, and sends ``--inputs`` hostile inputs (one
command, operation or frame each), in batches of one attack class per
connection:

- ``garbage``: random bytes and mutations of valid inputs of the protocol;
- ``patterns``: backtracking Redis globs with long channels to match, NATS
  wildcard subscriptions with deep subjects;
- ``internal``: publishing and subscribing on ``_INTEREST.*``/``_SESSION.*``,
  forged interest announcements, Lumberjack events naming them;
- ``flood``: blank lines, PINGs, PONGs, 64 KiB inline commands, tiny frames;
- ``oversize``: commands, payloads and frames beyond every limit;
- ``slowloris``: half an input, the connection left open (up to 32 at once);
- ``connections``: more connections at once than ``--max-clients``.

The first batches are one of each class, the rest drawn at random.  An
input is one command, operation or frame (a flood sends 4,096 of them on
one connection).  Each attacker waits until the gateway has dealt with its
batch, so the gateway faces one flooding client at a time (plus the
slowloris connections), as the fairness promise is stated.
Every ``PROBE_EVERY`` (10) batches, and at the end, the honest clients must
round-trip one message through the gateway within ``PROBE_TIMEOUT`` seconds
(for Lumberjack: an event acked), and the honest subscriber's wildcards that
match every internal subject (``*.ANNOUNCE``, ``*.HB``, ...) must never have
received one.  Memory is flat when the end is at
most 5 % + 8 MiB above the midpoint sample.  Exit status 0 when every kind
passed.
"""
from __future__ import annotations

import argparse
import random
import select
import socket
import statistics
import sys
import tempfile
import time
import zlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import orjson
import psutil

from fyrehose.runtime.process import FYREHOSE, ChildProcess
from fyrehose.runtime.readiness import free_port
from fyrehose.tools.fuzz.backbone import FLAT_SLACK, conclude, rss_of
from fyrehose.tools.fuzz.mutation import mutate

LOOPBACK = "127.0.0.1"
KINDS = ("redis", "nats", "marlin", "lumberjack")
MAX_CLIENTS = 64
SLOWLORIS = 32  # half-sent connections held open at once
PROBE_EVERY = 10  # batches between two honest round trips
PROBE_TIMEOUT = 10.0
SAMPLES = 10
SEND_TIMEOUT = 2.0  # a gateway that stops reading an attacker (back-pressure) ends that batch
HOLD_BYTES = 4 << 20  # the Lumberjack gateway's --hold-bytes in the fuzz run (its default is 64 MiB)
DRAIN_TIMEOUT = 10.0  # how long an attacker waits for the gateway to get through its batch
BATCH = {"garbage": 500, "patterns": 500, "internal": 500, "flood": 4096, "oversize": 4}  # inputs per connection
ATTACKS = ("garbage", "patterns", "internal", "flood", "oversize", "slowloris", "connections")
WEIGHTS = (40, 10, 10, 20, 3, 10, 2)
FORGED_ANNOUNCEMENT = orjson.dumps({"owner": "forged", "interval": 3600, "subjects": {">": 1000000},
                                    "globs": {"*a*a*a*a*a*a*a*a*b": 1000000}})
INTERNAL_NAMES = (b"ANNOUNCE", b"HB", b"HELLO", b"BYE")  # the last tokens of the internal subjects
INTERNAL_MARKS = (b"_INTEREST.ANNOUNCE", b"_SESSION.HB", b"_SESSION.HELLO", b"_SESSION.BYE")
HOSTILE_GLOBS = [b"*a*a*a*a*a*a*a*a*a*a*b", b"*" + b"?" * 500 + b"b*", b"*" + b"[ab]" * 120 + b"c*", b"a*" * 200]


@dataclass
class GatewayResult:
    kind: str
    inputs: int
    seconds: float
    rss_start: int
    rss_middle: int = 0
    rss_end: int = 0
    alive: bool = False
    flat: bool = False
    probes: int = 0
    probes_failed: int = 0
    internal_seen: int = 0
    probe_ms_median: float = 0.0  # an honest round trip while the attacks run (reported, never asserted)
    probe_ms_max: float = 0.0
    failures: list[str] = field(default_factory=list)  # the first failed round trips, with what the gateway said
    attacks: dict[str, int] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return self.alive and self.flat and self.probes > 0 and not self.probes_failed and not self.internal_seen


# ---------------------------------------------------------------- what each protocol's attacker sends

def resp_command(*args: bytes) -> bytes:
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(arg), arg) for arg in args)


def marlin_frame(kind: int, payload: bytes) -> bytes:
    body = bytes((0, kind)) + payload
    return len(body).to_bytes(4, "big") + body


def marlin_message(channel: bytes, data: bytes) -> bytes:
    return marlin_frame(3, len(data).to_bytes(8, "big") + bytes(8) + len(channel).to_bytes(2, "big") + channel + data)


def lumberjack_json(seq: int, document: bytes) -> bytes:
    return b"2J" + seq.to_bytes(4, "big") + len(document).to_bytes(4, "big") + document


def lumberjack_window(size: int) -> bytes:
    return b"2W" + size.to_bytes(4, "big")


class Attacker:
    """The hostile inputs of one protocol, by attack class: each call returns a batch (a list of inputs)."""

    def __init__(self, kind: str, rng: random.Random) -> None:
        self.kind = kind
        self.rng = rng
        self.seeds = SEEDS[kind]
        self.pool = list(self.seeds)

    def batch(self, attack: str, size: int) -> list[bytes]:
        """``size`` inputs of one attack class (a flood: ``size`` commands of one kind, back to back)."""
        if attack == "flood":
            unit = self._flood()
            return [unit] * (size if len(unit) < 1024 else min(size, 64))
        make: Callable[[], bytes] = getattr(self, f"_{attack}")
        return [make() for _ in range(size)]

    def _garbage(self) -> bytes:
        if self.rng.randrange(10) == 0:
            return self.rng.randbytes(self.rng.randint(0, 300))
        data = mutate(self.rng.choice(self.pool), self.rng, self.seeds)
        if len(self.pool) < 1000:
            self.pool.append(data)
        return data

    def _patterns(self) -> bytes:
        rng, kind = self.rng, self.kind
        if kind == "redis":
            if rng.randrange(2):
                return resp_command(b"PSUBSCRIBE", rng.choice(HOSTILE_GLOBS))
            return resp_command(b"PUBLISH", b"a" * rng.randint(200, 1000), b"x")
        if kind == "nats":
            depth = rng.randint(1, 60)
            if rng.randrange(2):
                return b"SUB %s %d\r\n" % (b".".join(rng.choice((b"*", b"a")) for _ in range(depth)) + b".>",
                                           rng.randrange(1 << 20))
            return b"PUB %s 1\r\nx\r\n" % b".".join([b"a"] * depth)
        if kind == "marlin":
            return marlin_message(b"*a*a*" * rng.randint(1, 100), b"x")
        return lumberjack_json(1, orjson.dumps({"@metadata": {"beat": "*." * rng.randint(1, 200)}}))

    def _internal(self) -> bytes:
        rng, kind = self.rng, self.kind
        subject = rng.choice((b"_INTEREST.ANNOUNCE", b"_SESSION.HB", b"_SESSION.BYE", b"_SESSION.HELLO"))
        if kind == "redis":
            return rng.choice((resp_command(b"PUBLISH", subject, FORGED_ANNOUNCEMENT), resp_command(b"SUBSCRIBE", subject),
                               resp_command(b"PSUBSCRIBE", b"_INTEREST.*")))
        if kind == "nats":
            return rng.choice((b"PUB %s %d\r\n%s\r\n" % (subject, len(FORGED_ANNOUNCEMENT), FORGED_ANNOUNCEMENT),
                               b"SUB %s 7\r\n" % subject, b"SUB _INTEREST.> 8\r\n"))
        if kind == "marlin":
            return rng.choice((marlin_frame(0, subject), marlin_message(subject, FORGED_ANNOUNCEMENT)))
        return lumberjack_window(1) + lumberjack_json(1, orjson.dumps({"@metadata": {"beat": subject.decode()}}))

    def _flood(self) -> bytes:
        """One command of a flood, cheap for the client and as costly as can be for the gateway."""
        rng, kind = self.rng, self.kind
        if kind == "redis":
            return rng.choice((b"\r\n", b"PING\r\n", b"GET " + b"k" * 60000 + b"\r\n"))
        if kind == "nats":
            return rng.choice((b"PONG\r\n", b"PING\r\n"))
        if kind == "marlin":
            return marlin_frame(0, b"flood")
        return lumberjack_window(1)

    def _oversize(self) -> bytes:
        rng, kind = self.rng, self.kind
        if kind == "redis":
            return rng.choice((b"*100000\r\n$9\r\nSUBSCRIBE\r\n" + (b"$1048576\r\n" + bytes(1 << 20) + b"\r\n") * 3,
                               b"*1\r\n$999999999999\r\n", resp_command(b"SUBSCRIBE", b"c" * 5000)))
        if kind == "nats":
            return rng.choice((b"PUB a 99999999\r\n", b"SUB " + b"a" * 5000 + b" 1\r\n", b"CONNECT " + b"{" * 4000))
        if kind == "marlin":
            return rng.choice((b"\xff\xff\xff\xff", marlin_frame(0, b"c" * 5000)))
        return rng.choice((b"2C\xff\xff\xff\xff", b"2C" + (20 << 20).to_bytes(4, "big") + bytes(1000),
                           b"2J\0\0\0\1\xff\xff\xff\xff"))

    def half(self) -> bytes:
        """The first half of an input, to be left unfinished."""
        return {"redis": b"*3\r\n$9\r\nSUBSCRIBE\r\n$5\r\nhal", "nats": b"PUB a 100\r\nxx",
                "marlin": b"\0\0\0\x40\0\0", "lumberjack": b"2C\0\x10\0\0xx"}[self.kind]


SEEDS = {
    "redis": [resp_command(b"PING"), resp_command(b"SUBSCRIBE", b"a"), resp_command(b"PSUBSCRIBE", b"a*"),
              resp_command(b"PUBLISH", b"a", b"b"), b"PING\r\n", resp_command(b"HELLO", b"3"),
              resp_command(b"CLIENT", b"SETNAME", b"x"), resp_command(b"UNSUBSCRIBE"), b'PUBLISH "a b" \'c\'\r\n'],
    "nats": [b'CONNECT {"verbose":false,"headers":true}\r\n', b"PUB a 1\r\nx\r\n", b"SUB a 1\r\n", b"UNSUB 1 5\r\n",
             b"PING\r\n", b"PONG\r\n", b"HPUB a r 12 13\r\nNATS/1.0\r\n\r\nx\r\n", b"SUB a q 2\r\n"],
    "marlin": [marlin_frame(0, b"a"), marlin_frame(1, b"a"), marlin_message(b"a", b"b"), marlin_frame(2, b"\0ok")],
    "lumberjack": [lumberjack_window(2) + lumberjack_json(1, b'{"a":1}'),
                   b"2C" + len(packed := zlib.compress(lumberjack_json(1, b'{"b":2}'))).to_bytes(4, "big") + packed,
                   b"1D\0\0\0\1\0\0\0\1\0\0\0\1k\0\0\0\1v"],
}


# ---------------------------------------------------------------- honest clients

class Honest:
    """Two well-behaved clients that must keep being served: a subscriber (to everything it may see) and a publisher."""

    def __init__(self, kind: str, address: tuple[str, int]) -> None:
        self.kind = kind
        self.address = address
        self.count = 0
        self.failures: list[str] = []
        self.seen: Counter = Counter()
        self.received = b""
        if kind == "lumberjack":
            self.publisher = socket.create_connection(address, timeout=PROBE_TIMEOUT)
            return
        self.subscriber = socket.create_connection(address, timeout=PROBE_TIMEOUT)
        self.publisher = socket.create_connection(address, timeout=PROBE_TIMEOUT)
        # wildcards that match the internal subjects but little of the attackers' traffic (which would make
        # an honest subscriber that reads only at each probe a slow consumer)
        if kind == "redis":
            self.subscriber.sendall(resp_command(b"SUBSCRIBE", b"fuzz.probe")
                                    + resp_command(b"PSUBSCRIBE", *[b"*." + name for name in INTERNAL_NAMES]))
        elif kind == "nats":
            self.subscriber.sendall(b'CONNECT {"verbose":false}\r\nSUB fuzz.probe 1\r\n'
                                    + b"".join(b"SUB *.%s %d\r\n" % (name, 2 + index)
                                               for index, name in enumerate(INTERNAL_NAMES)))
            self.publisher.sendall(b'CONNECT {"verbose":false}\r\n')
        else:
            self.subscriber.sendall(marlin_frame(0, b"fuzz.probe"))
        time.sleep(0.3)

    def probe(self) -> bool:
        """One round trip within PROBE_TIMEOUT; a failure's evidence is kept in :attr:`failures`."""
        self.count += 1
        mark = b"probe-%d" % self.count
        try:
            if self.kind == "lumberjack":
                self.publisher.sendall(lumberjack_window(1) + lumberjack_json(self.count, b'{"probe":%d}' % self.count))
                ack = b"2A" + self.count.to_bytes(4, "big")
                return self._judge(_read_until(self.publisher, ack, b"", self.seen), mark)
            if self.kind == "redis":
                self.publisher.sendall(resp_command(b"PUBLISH", b"fuzz.probe", mark))
            elif self.kind == "nats":
                self.publisher.sendall(b"PUB fuzz.probe %d\r\n%s\r\n" % (len(mark), mark))
            else:
                self.publisher.sendall(marlin_message(b"fuzz.probe", mark))
            found = _read_until(self.subscriber, mark, self.received[-32:], self.seen)
            if found is not None:
                self.received = found
                if self.kind != "marlin":
                    _drain(self.publisher)
            return self._judge(found, mark)
        except OSError as exc:
            self.failures.append(f"{mark.decode()}: {exc}")
            return False

    def _judge(self, found: bytes | None, mark: bytes) -> bool:
        if found is not None:
            return True
        said = b""
        for sock in (self.publisher, getattr(self, "subscriber", None)):
            if sock is not None and select.select([sock], [], [], 0)[0]:
                try:
                    said += sock.recv(4096)[-200:]
                except OSError:
                    pass
        self.failures.append(f"{mark.decode()}: nothing within {PROBE_TIMEOUT:g} s; the gateway said {said!r}")
        return False

    def close(self) -> None:
        for sock in (getattr(self, "subscriber", None), self.publisher):
            if sock is not None:
                sock.close()




def _read_until(sock: socket.socket, needle: bytes, data: bytes, seen: Counter) -> bytes | None:
    """Read until ``needle`` arrives (None after PROBE_TIMEOUT); internal subjects seen on the way are counted."""
    deadline = time.monotonic() + PROBE_TIMEOUT
    while needle not in data:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([sock], [], [], left)[0]:
            return None
        chunk = sock.recv(1 << 20)
        if not chunk:
            return None
        seen["internal"] += sum((data[-32:] + chunk).count(mark) for mark in INTERNAL_MARKS)
        data = data[-4096:] + chunk
    return data


def _drain(sock: socket.socket) -> None:
    while select.select([sock], [], [], 0)[0]:
        try:
            if not sock.recv(1 << 20):
                return
        except OSError:
            return


# ---------------------------------------------------------------- the run

def _attack(address, inputs: list[bytes]) -> None:
    """One hostile client: send the batch, then read until the gateway has dealt with all of it and hung up.

    Waiting for the end keeps the attackers to one flooding connection at a
    time besides the slowloris ones: the fuzzer plays a single hostile client
    per attack, not a crowd (closing at once would leave the gateway working
    through dozens of closed connections' buffered input together).
    """
    try:
        sock = socket.create_connection(address, timeout=SEND_TIMEOUT)
    except OSError:
        return
    try:
        sock.sendall(b"".join(inputs))
        sock.shutdown(socket.SHUT_WR)
        deadline = time.monotonic() + DRAIN_TIMEOUT
        while time.monotonic() < deadline and select.select([sock], [], [], deadline - time.monotonic())[0]:
            if not sock.recv(1 << 20):
                break
    except OSError:
        pass  # refused, closed or paused by the gateway: what an attacker gets
    finally:
        sock.close()


def _connections(address) -> None:
    held = []
    for _ in range(MAX_CLIENTS + 16):
        try:
            held.append(socket.create_connection(address, timeout=SEND_TIMEOUT))
        except OSError:
            break
    for sock in held:
        sock.close()


def _gateway_argv(kind: str, port: int, backbone: str) -> list[str]:
    argv = FYREHOSE + ["gateway", kind, "--listen", f"{LOOPBACK}:{port}", "--backbone", backbone]
    if kind == "lumberjack":
        # --hold-bytes: what it keeps of the published events for FORWARDs grows to this by design
        return argv + ["--max-connections", str(MAX_CLIENTS), "--stall-timeout", "2", "--hold-bytes", str(HOLD_BYTES)]
    return argv + ["--max-clients", str(MAX_CLIENTS)] + (["--handshake-timeout", "2"] if kind == "nats" else [])


def fuzz_gateway(kind: str, inputs: int, seed: int, log=print) -> GatewayResult:
    with tempfile.TemporaryDirectory(prefix=f"fyrehose-fuzz-gateway-{kind}-") as tmp:
        workdir = Path(tmp)
        udp = free_port(socket.SOCK_DGRAM)
        backbone = ChildProcess(FYREHOSE + ["backbone", "--listen", f"{LOOPBACK}:{udp}", "--workers", "0",
                                            "--state-dir", str(workdir / "state")], workdir / "backbone.log")
        gateway = None
        honest = None
        slow: list[socket.socket] = []
        try:
            backbone.wait_ready(30)
            port = free_port(socket.SOCK_STREAM)
            gateway = ChildProcess(_gateway_argv(kind, port, f"{LOOPBACK}:{udp}"), workdir / "gateway.log")
            gateway.wait_ready(30)
            address = (LOOPBACK, port)
            handle = psutil.Process(gateway.pid)
            honest = Honest(kind, address)
            result = GatewayResult(kind, 0, 0.0, rss_of(handle))
            rng = random.Random(seed)
            attacker = Attacker(kind, rng)
            attacks: Counter = Counter()
            samples: list[int] = []
            round_trips: list[float] = []
            every = max(1, inputs // SAMPLES)
            next_sample = every
            batches = 0
            started = time.monotonic()
            while result.inputs < inputs and gateway.alive():
                attack = ATTACKS[batches] if batches < len(ATTACKS) else rng.choices(ATTACKS, WEIGHTS)[0]
                if attack == "slowloris":
                    if len(slow) >= SLOWLORIS:
                        slow.pop(0).close()
                    try:
                        sock = socket.create_connection(address, timeout=SEND_TIMEOUT)
                        sock.sendall(attacker.half())
                        slow.append(sock)
                    except OSError:
                        pass
                    sent = 1
                elif attack == "connections":
                    _connections(address)
                    sent = MAX_CLIENTS + 16
                else:
                    size = min(inputs - result.inputs, BATCH[attack])
                    batch = attacker.batch(attack, size)
                    _attack(address, batch)
                    sent = len(batch)
                result.inputs += sent
                attacks[attack] += sent
                batches += 1
                if batches % PROBE_EVERY == 0:
                    result.probes += 1
                    began = time.perf_counter()
                    result.probes_failed += not honest.probe()
                    round_trips.append((time.perf_counter() - began) * 1000)
                while result.inputs >= next_sample:
                    samples.append(rss_of(handle))
                    next_sample += every
            result.seconds = time.monotonic() - started
            for sock in slow:
                sock.close()
            slow.clear()
            result.probes += 1
            result.probes_failed += not honest.probe()
            time.sleep(1.0)
            result.alive = gateway.alive()
            result.attacks = dict(attacks)
            result.internal_seen = honest.seen["internal"]
            result.failures = honest.failures[:3]
            if round_trips:
                result.probe_ms_median = statistics.median(round_trips)
                result.probe_ms_max = max(round_trips)
            if result.alive:
                result.rss_end = rss_of(handle)
                result.rss_middle = samples[len(samples) // 2] if samples else result.rss_start
                result.flat = result.rss_end <= result.rss_middle * 1.05 + FLAT_SLACK
            log(f"{kind}: {result.inputs} hostile inputs in {result.seconds:.1f} s "
                f"({', '.join(f'{name} {count}' for name, count in sorted(attacks.items()))}), "
                f"RSS {result.rss_start >> 20} -> {result.rss_middle >> 20} -> {result.rss_end >> 20} MiB, "
                f"alive={result.alive} flat={result.flat}, honest round trips {result.probes - result.probes_failed}/"
                f"{result.probes} (median {result.probe_ms_median:.1f} ms, max {result.probe_ms_max:.1f} ms), "
                f"internal subjects seen {result.internal_seen}"
                + "".join(f"\n  failed: {failure}" for failure in result.failures))
            return result
        finally:
            for sock in slow:
                sock.close()
            if honest is not None:
                honest.close()
            if gateway is not None:
                gateway.stop()
            backbone.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fyrehose.tools.fuzz gateway",
                                     description=(__doc__ or "").split("\n")[0])
    parser.add_argument("kind", choices=(*KINDS, "all"))
    parser.add_argument("--inputs", type=int, default=1_000_000, help="hostile inputs per gateway (default 1000000)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    args = parser.parse_args(argv)
    if args.inputs < 1:
        parser.error("--inputs must be positive")
    kinds = KINDS if args.kind == "all" else (args.kind,)
    return conclude([fuzz_gateway(kind, args.inputs, args.seed) for kind in kinds], args.json)


if __name__ == "__main__":
    sys.exit(main())
