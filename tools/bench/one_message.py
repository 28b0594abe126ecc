"""The one-message datagram's path, stage by stage, offline: µs of Python per datagram where nothing is batched.

``python -m fyrehose.tools.bench.one_message [--rounds 5] [--datagrams 20000]``

At 10,000 msgs/s every datagram carries one message, so what a message waits
for is the per-datagram work of the two Python processes on its path: the
backbone's and the subscriber's.  This times each stage of that work on the
pure cores (no sockets), one call at a time with the monotonic clock (each
figure includes one clock reading, about 0.05 µs), and reports the median call
of each round, min/median/max over the rounds:

- the backbone (4 subscribers): ``Backbone.receive`` of one untagged PUSH frame
  (sequenced), ``Backbone.flush`` (the DELIVERs to send), ``keep_recent`` (the
  recent log's copy), and their sum;
- the subscriber: ``BackboneConnection.receive`` of the one-frame DELIVER that
  continues the stream, with the options :class:`fyrehose.Client` uses (the
  datagram whole, as a run) and with the default ones (its message); the
  tracker's in-order cases (``advance``, ``deliver``); and what the bench's own
  fyrehose subscriber runs (``HoleRecovery.take``, then ``DeliverScanner.scan``).

Uses only the modules' public calls, so the same file times any build: run it
with ``FYREHOSE_PURE=1`` for the source, or with another checkout's interpreter.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import TextIO

from fyrehose.backbone.core import Backbone
from fyrehose.protocol import codec
from fyrehose.protocol.connection import BackboneConnection, ConnectionOptions, DeliverForm
from fyrehose.protocol.tracker import SequenceTracker
from fyrehose.runtime.compiled import describe
from fyrehose.tools.bench.recovery import HoleRecovery
from fyrehose.tools.bench.scanning import DeliverScanner
from fyrehose.tools.bench.stats import spread

BACKBONE = ("127.0.0.1", 2323)
PUBLISHER = ("127.0.0.1", 40001)
SUBSCRIBERS = [("127.0.0.1", 40010 + index) for index in range(4)]
PAYLOAD = b"x" * 64
CLIENT_FLAGS = codec.FLAG_HEAD | codec.FLAG_REDELIVERING | codec.FLAG_BATCH  # what a subscribing Client sends
BENCH_FLAGS = codec.FLAG_NOJOURNAL | codec.FLAG_REDELIVERING | codec.FLAG_BATCH  # the bench's subscribers

Stages = dict[str, list[int]]  # stage -> ns per call, one round


def _backbone(datagrams: int, stages: Stages) -> None:
    backbone = Backbone(reserve_block=1 << 40)
    now = 1.0
    for index, addr in enumerate(SUBSCRIBERS):
        backbone.receive(codec.encode(codec.Keepalive(flags=BENCH_FLAGS, token=bytes([index]) * codec.TOKEN_SIZE)),
                         addr, now)
    backbone.flush(now)
    push = codec.encode_push(PAYLOAD)
    clock = time.perf_counter_ns
    receive, flush, keep, total = stages["backbone: receive"], stages["backbone: flush"], \
        stages["backbone: keep_recent"], stages["backbone: all three"]
    for _ in range(datagrams):
        now += 1e-6
        start = clock()
        backbone.receive(push, PUBLISHER, now)
        received = clock()
        backbone.flush(now)
        flushed = clock()
        backbone.keep_recent()
        kept = clock()
        receive.append(received - start)
        flush.append(flushed - received)
        keep.append(kept - flushed)
        total.append(kept - start)


def _delivers(datagrams: int) -> list[bytes]:
    return [codec.encode_deliver(seq, PAYLOAD) for seq in range(1, datagrams + 1)]


def _connection(datagrams: int, options: ConnectionOptions, samples: list[int]) -> None:
    connection = BackboneConnection(BACKBONE, options)
    connection.track(1)
    receive = connection.receive
    clock = time.perf_counter_ns
    now = 1.0
    for data in _delivers(datagrams):
        start = clock()
        receive(data, BACKBONE, now)
        samples.append(clock() - start)


def _tracker(datagrams: int, stages: Stages) -> None:
    clock = time.perf_counter_ns
    tracker = SequenceTracker(1)
    advance, samples = tracker.advance, stages["tracker: advance (in order)"]
    for seq in range(1, datagrams + 1):
        start = clock()
        advance(seq, 1)
        samples.append(clock() - start)
    tracker = SequenceTracker(1)
    deliver, samples = tracker.deliver, stages["tracker: deliver (in order)"]
    for seq in range(1, datagrams + 1):
        start = clock()
        deliver(seq, PAYLOAD, 1.0)
        samples.append(clock() - start)


def _bench_subscriber(datagrams: int, samples: list[int]) -> None:
    recovery = HoleRecovery(SequenceTracker(1))
    scanner = DeliverScanner(len(PAYLOAD))
    take, scan = recovery.take, scanner.scan
    clock = time.perf_counter_ns
    now = time.monotonic
    for data in _delivers(datagrams):
        start = clock()
        if not take(data, now):
            scan(data)
        samples.append(clock() - start)


STAGES = ("backbone: receive", "backbone: flush", "backbone: keep_recent", "backbone: all three",
          "subscriber: connection.receive (Client's options)", "subscriber: connection.receive (messages)",
          "tracker: advance (in order)", "tracker: deliver (in order)", "bench subscriber: take + scan")


def one_round(datagrams: int) -> dict[str, float]:
    """Median µs per call of every stage, one round."""
    stages: Stages = {name: [] for name in STAGES}
    _backbone(datagrams, stages)
    _connection(datagrams, ConnectionOptions(flags=CLIENT_FLAGS, delivers=DeliverForm.ANY_RUNS),
                stages["subscriber: connection.receive (Client's options)"])
    _connection(datagrams, ConnectionOptions(flags=CLIENT_FLAGS), stages["subscriber: connection.receive (messages)"])
    _tracker(datagrams, stages)
    _bench_subscriber(datagrams, stages["bench subscriber: take + scan"])
    return {name: statistics.median(samples) / 1000 for name, samples in stages.items()}


def measure(rounds: int, datagrams: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {name: [] for name in STAGES}
    for _ in range(rounds):
        for name, value in one_round(datagrams).items():
            out[name].append(value)
    return out


def write_table(figures: dict[str, list[float]], out: TextIO) -> None:
    out.write(f"{describe()}\nµs per one-message datagram (median call of a round), min / median / max over rounds\n")
    for name, values in figures.items():
        low, middle, high = spread(values) or (0.0, 0.0, 0.0)
        out.write(f"  {name:<52} {low:7.3f} {middle:7.3f} {high:7.3f}\n")


def main(argv: list[str] | None = None, out: TextIO = sys.stdout) -> int:
    parser = argparse.ArgumentParser(prog="python -m fyrehose.tools.bench.one_message", description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--datagrams", type=int, default=20000, help="datagrams per stage and round")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.datagrams < 1:
        parser.error("--rounds and --datagrams must be at least 1")
    write_table(measure(args.rounds, args.datagrams), out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
