"""``fyrehose cache bench``: does the cache keep up with a fast stream of updates?

It starts its own single-process backbone and ``fyrehose cache`` on loopback,
then publishes ``--updates`` enveloped JSON updates (``{"n": i, "px": ...}``)
round-robin over ``--subjects`` subjects with ``publish_many`` as fast as
confirmations allow.  Meanwhile a prober process asks the cache for a
snapshot of a random subject every ``--probe-every`` seconds and times each
answer.  Reported (table, or JSON with ``--json``):

- **published msgs/s**: the publisher's rate;
- **snapshot answer ms**: p50, p99 and max of the prober's answers while the
  publisher ran, and how many took longer than 100 ms or got none within 2 s;
- **caught up after**: seconds from the publisher's end until the cache
  answered a snapshot requested right then (the stream is ordered, so it had
  applied every update by then; null: not within ``--settle``);
- **at the last value 1 s after**: one second after the publisher finished,
  a snapshot of every subject: how many hold their last update, with status ``ok``;
- **cache CPU µs per update**: the cache process's CPU time from the first
  update until it caught up, divided by the updates.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import orjson
import psutil

from fyrehose.errors import InputError
from fyrehose.runtime.machine_cpu import process_cpu_seconds
from fyrehose.runtime.process import FYREHOSE, ChildProcess
from fyrehose.runtime.readiness import LOOPBACK, free_port

SLOW_MS = 100.0
PROBE_TIMEOUT = 2.0


def add_bench_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--updates", type=int, default=1_000_000, metavar="N", help="updates to publish (default 1000000)")
    parser.add_argument("--subjects", type=int, default=1000, metavar="N", help="subjects they cycle over (default 1000)")
    parser.add_argument("--probe-every", type=float, default=0.05, metavar="S",
                        help="seconds between the prober's snapshots (default 0.05)")
    parser.add_argument("--settle", type=float, default=30.0, metavar="S",
                        help="how long after publishing to wait for every subject's last value (default 30)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")


def _payload(n: int) -> bytes:
    return orjson.dumps({"n": n, "px": n % 997, "qty": n % 13})


def _probe(conn, backbone: str, subjects: int, every: float) -> None:
    """The prober process: timed snapshots of random subjects until told to stop; the times in ms (None: no answer)."""
    from fyrehose.drivers.client import Client
    from fyrehose.errors import RequestTimeout

    times: list[float | None] = []
    with Client(backbone) as client:
        conn.send("ready")
        while True:  # the first snapshot at once: a run shorter than ``every`` is probed too
            began = time.perf_counter()
            try:
                client.snapshot(f"bench.{random.randrange(subjects)}", timeout=PROBE_TIMEOUT, retry=PROBE_TIMEOUT)
                times.append((time.perf_counter() - began) * 1000)
            except RequestTimeout:
                times.append(None)
            if conn.poll(every):
                break
    conn.send(times)
    conn.close()


def run_bench(args: argparse.Namespace) -> int:
    from fyrehose.drivers.client import Client
    from fyrehose.errors import RequestTimeout
    from fyrehose.subjects.envelope import Envelope

    if args.updates < 1 or args.subjects < 1 or args.subjects > args.updates or args.probe_every <= 0:
        raise InputError("--updates and --subjects must be at least 1, --subjects at most --updates, "
                         "--probe-every positive")
    with tempfile.TemporaryDirectory(prefix="fyrehose-cache-bench-") as tmp:
        root = Path(tmp)
        address = f"{LOOPBACK}:{free_port()}"
        backbone = ChildProcess(FYREHOSE + ["backbone", "--listen", address, "--state-dir", str(root / "state"),
                                            "--workers", "0"], root / "backbone.log")
        cache = None
        prober = None
        try:
            backbone.wait_ready(20)
            cache = ChildProcess(FYREHOSE + ["cache", "--backbone", address, "--max-bytes", str(1 << 30)],
                                 root / "cache.log")
            cache.wait_ready(20)
            cache_process = {"cache": psutil.Process(cache.pid)}
            context = multiprocessing.get_context("fork")
            parent_end, child_end = context.Pipe()
            prober = context.Process(target=_probe, args=(child_end, address, args.subjects, args.probe_every),
                                     daemon=True)
            prober.start()
            if not parent_end.poll(20):
                raise InputError("the prober did not start")
            parent_end.recv()
            last = {n % args.subjects: n for n in range(args.updates - args.subjects, args.updates)}
            envelopes = [Envelope(f"bench.{n % args.subjects}", _payload(n)) for n in range(args.updates)]
            with Client(address, subscribe=False) as publisher:
                cpu_before = process_cpu_seconds(cache_process)["cache"]
                began = time.perf_counter()
                for start in range(0, args.updates, 2048):
                    publisher.publish_many(envelopes[start:start + 2048])
                published = time.perf_counter()
            parent_end.send("stop")
            with Client(address) as checker:
                # the stream is ordered: the cache answers this only once it has applied every update before it
                try:
                    checker.snapshot("bench.0", timeout=args.settle, retry=args.settle)
                    caught_up: float | None = time.perf_counter() - published
                except RequestTimeout:
                    caught_up = None
                cpu_after = process_cpu_seconds(cache_process)["cache"]
                time.sleep(max(0.0, published + 1.0 - time.perf_counter()))
                good_after_1s = _at_last_value(checker, last)
            probes = parent_end.recv() if parent_end.poll(PROBE_TIMEOUT * 3) else []
        finally:
            if prober is not None and prober.is_alive():
                prober.kill()
                prober.join(5)
            if cache is not None:
                cache.stop(10)
            backbone.stop(10)
    answered = [t for t in probes if t is not None]
    result = {
        "machine": {"cores": os.cpu_count(), "python": sys.version.split()[0]},
        "updates": args.updates,
        "subjects": args.subjects,
        "published_per_s": args.updates / (published - began),
        "snapshots": len(probes),
        "snapshot_ms_p50": statistics.median(answered) if answered else None,
        "snapshot_ms_p99": _percentile(answered, 0.99),
        "snapshot_ms_max": max(answered) if answered else None,
        "snapshots_over_100ms": sum(t > SLOW_MS for t in answered),
        "snapshots_unanswered": len(probes) - len(answered),
        "at_last_value_ok_after_1s": good_after_1s,
        "caught_up_after_s": caught_up,
        "cache_cpu_us_per_update": (cpu_after - cpu_before) / args.updates * 1e6,
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        _print_table(result)
    return 0


def _at_last_value(client, last: dict[int, int]) -> int:
    """How many subjects the cache answers with their last update and status ok."""
    from fyrehose.errors import RequestTimeout
    from fyrehose.subjects.envelope import Status

    good = 0
    for index, n in last.items():
        try:
            answer = client.snapshot(f"bench.{index}", timeout=PROBE_TIMEOUT)
        except RequestTimeout:
            continue
        if answer.status == Status.OK and answer.data and orjson.loads(answer.data).get("n") == n:
            good += 1
    return good


def _percentile(values: list[float], share: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def _print_table(result: dict) -> None:
    def ms(value: float | None) -> str:
        return "-" if value is None else f"{value:.1f}"

    settled = result["caught_up_after_s"]
    print(f"cache bench: {result['updates']} updates over {result['subjects']} subjects; "
          f"{result['machine']['cores']} cores, Python {result['machine']['python']}")
    rows = [
        ("published msgs/s", f"{result['published_per_s']:,.0f}"),
        ("snapshot answer ms p50 / p99 / max", f"{ms(result['snapshot_ms_p50'])} / {ms(result['snapshot_ms_p99'])}"
                                               f" / {ms(result['snapshot_ms_max'])}"),
        ("snapshots over 100 ms / unanswered / all",
         f"{result['snapshots_over_100ms']} / {result['snapshots_unanswered']} / {result['snapshots']}"),
        ("subjects at the last value, ok, 1 s after", f"{result['at_last_value_ok_after_1s']} / {result['subjects']}"),
        ("caught up after s", "-" if settled is None else f"{settled:.2f}"),
        ("cache CPU µs per update", f"{result['cache_cpu_us_per_update']:.2f}"),
    ]
    for name, value in rows:
        print(f"{name:<44} {value}")
