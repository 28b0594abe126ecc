"""Soak: half of the measured capacity for 30 minutes, in each backbone mode (slow; not in the default run).

    .venv/bin/python -m pytest tests/backbone/test_soak.py -m slow -s            # 30 min per mode
    FYREHOSE_SOAK_SECONDS=120 .venv/bin/python -m pytest tests/backbone/test_soak.py -m slow -s   # shorter

It first measures the capacity the way a user would see it (confirmed
messages/s of one publisher with the subscribers attached, for 5 s), then
publishes at half of that.  Expected outcome: every confirmed message reaches
both subscribers (a BATCH one and a plain one) exactly once and in order with
no Lost event (zero unrecovered loss), and the memory of the backbone (the
proportional set size of all its processes, so shared rings count once) is
flat: at the end at most 5 % + 16 MiB above its value at a quarter of the run.
The multi-process backbone touches its 96 MiB of rings progressively until
they first wrap, so runs much shorter than ten minutes can fail that check.  The figures are printed and written as JSON to
``FYREHOSE_SOAK_REPORT`` when set.
"""
from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import asdict, dataclass, field

import psutil
import pytest
from conftest import BACKBONE_MODES

from fyrehose import Client
from fyrehose.protocol.tracker import Lost

SECONDS = float(os.environ.get("FYREHOSE_SOAK_SECONDS", 1800))
MEASURE_SECONDS = 5.0
CHUNK = 50
PAYLOAD = b"s" * 100


@dataclass
class Tally:
    """What one subscriber saw, in constant memory."""

    received: int = 0
    first: int | None = None
    last: int = 0
    out_of_order: int = 0
    lost: int = 0

    def add(self, event) -> None:
        if isinstance(event, Lost):
            self.lost += event.count
            self.last = event.to_seq
            return
        if self.first is None:
            self.first = event.seq
        elif event.seq != self.last + 1:
            self.out_of_order += 1
        self.last = event.seq
        self.received += 1


@dataclass
class SoakReport:
    workers: int
    seconds: float
    capacity: float  # confirmed messages/s measured first
    rate: float
    published: int = 0
    publish_failures: int = 0
    memory: list[tuple[float, int]] = field(default_factory=list)  # (elapsed s, PSS bytes)
    subscribers: list[dict] = field(default_factory=list)


def memory_of(pid: int) -> int:
    """Proportional set size of the backbone and its workers: shared rings counted once, not once per process."""
    proc = psutil.Process(pid)
    total = 0
    for p in [proc] + proc.children(recursive=True):
        try:
            total += p.memory_full_info().pss
        except psutil.NoSuchProcess:
            continue
    return total


def drain(stream, tally: Tally, stop: threading.Event) -> None:
    while not stop.is_set():
        event = stream.get(timeout=0.2)
        if event is not None:
            tally.add(event)


def publish_for(pub: Client, seconds: float, rate: float | None, counts: dict) -> None:
    started = time.monotonic()
    batches = 0
    while time.monotonic() - started < seconds:
        try:
            counts["published"] += len(pub.publish_many([PAYLOAD] * CHUNK, timeout=10))
            counts["last"] = counts["published"]
        except Exception:  # counted; the run fails on it below
            counts["failures"] += 1
        batches += 1
        if rate:
            ahead = started + batches * CHUNK / rate - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)


@pytest.mark.slow
@pytest.mark.parametrize("workers", BACKBONE_MODES, ids=lambda w: f"workers={w}")
def test_soak_at_half_capacity_loses_nothing_and_keeps_memory_flat(backbone_factory, workers):
    backbone = backbone_factory(workers=workers)
    stop = threading.Event()
    tallies = [Tally(), Tally()]
    with Client(backbone.addr) as keeper, Client(backbone.addr, batch=True) as batch_sub, \
            Client(backbone.addr, batch=False) as plain_sub, Client(backbone.addr, subscribe=False) as pub:
        keeper.subscribe()
        streams = [batch_sub.subscribe(on_loss="yield"), plain_sub.subscribe(on_loss="yield")]
        drainers = [threading.Thread(target=drain, args=(s, t, stop), daemon=True) for s, t in zip(streams, tallies)]
        keeper_tally = Tally()
        drainers.append(threading.Thread(target=drain, args=(keeper.subscribe(), keeper_tally, stop), daemon=True))
        for thread in drainers:
            thread.start()
        try:
            measure = {"published": 0, "failures": 0, "last": 0}
            publish_for(pub, MEASURE_SECONDS, None, measure)
            capacity = measure["published"] / MEASURE_SECONDS
            report = SoakReport(workers, SECONDS, capacity, capacity / 2)
            counts = {"published": 0, "failures": 0, "last": 0}
            publisher = threading.Thread(target=publish_for, args=(pub, SECONDS, report.rate, counts), daemon=True)
            started = time.monotonic()
            publisher.start()
            for i in range(1, 21):
                time.sleep(max(0.0, started + SECONDS * i / 20 - time.monotonic()))
                report.memory.append((round(time.monotonic() - started, 1), memory_of(backbone.proc.pid)))
            publisher.join(SECONDS + 60)
            last = pub.publish(b"end of soak")
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and any(t.last < last for t in tallies):
                time.sleep(0.1)
        finally:
            stop.set()
            for thread in drainers:
                thread.join(5)
    report.published = counts["published"]
    report.publish_failures = counts["failures"] + measure["failures"]
    report.subscribers = [asdict(tally) for tally in tallies]
    print(json.dumps(asdict(report), indent=1))
    if os.environ.get("FYREHOSE_SOAK_REPORT"):
        with open(os.environ["FYREHOSE_SOAK_REPORT"], "a") as file:
            file.write(json.dumps(asdict(report)) + "\n")
    assert report.publish_failures == 0
    for tally in tallies:  # every sequence from its first to the last one published, each once, in order
        assert tally.lost == 0 and tally.out_of_order == 0, tally
        assert tally.last == last and tally.received == tally.last - tally.first + 1, tally
    quarter = report.memory[len(report.memory) // 4 - 1][1]
    assert report.memory[-1][1] <= quarter * 1.05 + (16 << 20), report.memory
