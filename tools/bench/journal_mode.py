"""``fyrehose bench --journal N``: N journals recording the single-process backbone at one offered rate.

Each step starts a fresh backbone (``--workers 0``, with ``--metrics``), N
``fyrehose journal`` processes on it (each with ``--metrics``), then the
bench's lean publishers (unconfirmed packed PUSH, the same load generators as
the servers mode) at ``--rate`` (or as fast as they can) for ``--duration``
seconds.  Every 0.2 s it reads the backbone's count of sequenced messages
(its HEAD: the backbone starts from sequence 1) and each journal's metrics.
Per journal it reports:

- **journaled msgs/s**: messages the journal wrote during the publishing window, per second;
- **lag** at the end of the window: messages (HEAD minus what the journal wrote or recorded
  lost) and seconds (those messages at the rate the backbone sequenced), the journal's own
  ``fyrehose_journal_lag_seconds`` then, and the largest of the latter seen during the window;
- **catch-up**: seconds after the publishers stopped until the journal held everything up to
  the HEAD (null when it did not within ``--catch-up`` seconds);
- **permanent loss**: sequences the journal recorded as lost (``gaps.jsonl``).

With ``--drop-every N`` the backbone keeps no recent messages (``--recent-bytes
0``) and one more process subscribes (packed DELIVERs, no journal of its own)
and discards one DELIVER datagram in N as if the network had lost it: every
hole it REQUESTs can only be filled by the journals, from their segments.  It
reports the holes' recovery times (noticed to filled: p50, p99, max) and the
messages it never got, counted until ``--catch-up`` after publishing.

Figures are medians over ``--rounds``; ``--json FILE`` writes the document.
"""
from __future__ import annotations

import array
import multiprocessing
import socket
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from fyrehose.loadtest.prometheus import parse_samples
from fyrehose.runtime.process import FYREHOSE, ChildProcess
from fyrehose.runtime.readiness import LOOPBACK, free_port
from fyrehose.tools.bench import stats
from fyrehose.tools.bench.loadgen import LoadSpec, publisher_main, subscriber_main
from fyrehose.tools.bench.orchestra import _Child
from fyrehose.tools.bench.servers import server_for
from fyrehose.tools.bench.targets import BenchError, parse_targets

SAMPLE_EVERY = 0.2
READY_TIMEOUT = 20.0
SETTLE = 0.5


@dataclass(frozen=True)
class JournalSettings:
    journals: int
    publishers: int
    payload: int
    duration: float
    rate: float | None  # None: as fast as the publishers can
    rounds: int
    catch_up: float  # seconds after publishing to wait for the journals to reach the HEAD
    fsync: str
    drop_every: int = 0  # a recovering subscriber that drops one DELIVER datagram in N; 0: none


def _scrape(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://{LOOPBACK}:{port}/metrics", timeout=2) as response:
        return parse_samples(response.read().decode())


class _Journal:
    def __init__(self, number: int, backbone: str, workdir: Path, fsync: str) -> None:
        self.name = f"journal-{number}"
        self.metrics_port = free_port(socket.SOCK_STREAM)
        self.child = ChildProcess(FYREHOSE + [
            "journal", "--backbone", backbone, "--dir", str(workdir / self.name), "--no-parquet",
            "--fsync", fsync, "--metrics", f"{LOOPBACK}:{self.metrics_port}"], workdir / f"{self.name}.log")
        self.max_lag_s = 0.0

    def sample(self) -> dict[str, float]:
        if not self.child.alive():
            raise BenchError(f"{self.name} exited: {self.child.output().strip().splitlines()[-1:]}")
        return _scrape(self.metrics_port)


def _position(values: dict[str, float]) -> float:
    """Every sequence up to this is written or recorded lost (a journal that started with sequence 1)."""
    return values["fyrehose_journal_written_total"] + values["fyrehose_journal_lost_total"]


def measure_step(settings: JournalSettings, workdir: Path) -> dict:
    target = parse_targets("fyrehose-single")[0]
    server = server_for(target, {}, workdir, 0, None)
    backbone_metrics = free_port(socket.SOCK_STREAM)
    server.command += ["--metrics", f"{LOOPBACK}:{backbone_metrics}"]
    if settings.drop_every:
        server.command += ["--recent-bytes", "0"]  # the subscriber's holes can be filled by the journals alone
    server.start()
    address = f"{server.address[0]}:{server.address[1]}"
    journals = [_Journal(n, address, workdir, settings.fsync) for n in range(1, settings.journals + 1)]
    context = multiprocessing.get_context("fork")
    children: list[_Child] = []
    try:
        for journal in journals:
            journal.child.wait_ready(READY_TIMEOUT)
        subscriber = None
        if settings.drop_every:
            subscriber = _Child(context, "subscriber", subscriber_main, LoadSpec(
                "fyrehose", server.address, settings.payload, batch=True, drop_every=settings.drop_every))
            children.append(subscriber)
            subscriber.expect("ready", time.monotonic() + READY_TIMEOUT)
        per_publisher = None if settings.rate is None else settings.rate / settings.publishers
        spec = LoadSpec("fyrehose", server.address, settings.payload, rate=per_publisher)
        publishers = [_Child(context, f"publisher-{n}", publisher_main, spec) for n in range(1, settings.publishers + 1)]
        children += publishers
        deadline = time.monotonic() + READY_TIMEOUT
        for child in publishers:
            child.expect("ready", deadline)
        start = time.monotonic() + SETTLE
        end = start + settings.duration
        def head() -> float:
            return _scrape(backbone_metrics)["fyrehose_pushes_total"]

        head_before = head()
        for child in children:  # the subscriber goes on receiving (recoveries) while the journals catch up
            child.conn.send(("start", start, end, end + settings.catch_up if child is subscriber else end))
        time.sleep(max(0.0, start - time.monotonic()))
        head_start = head()
        first = [journal.sample() for journal in journals]
        while (now := time.monotonic()) < end:
            for journal in journals:
                journal.max_lag_s = max(journal.max_lag_s, journal.sample()["fyrehose_journal_lag_seconds"])
            time.sleep(min(SAMPLE_EVERY, max(0.0, end - now)))
        head_end = head()
        last = [journal.sample() for journal in journals]
        ended = time.monotonic()
        sent = sum(child.expect("result", ended + 30)["sent"] for child in publishers)
        final_head = head()
        caught_up: list[float | None] = [None] * len(journals)
        while time.monotonic() < ended + settings.catch_up and None in caught_up:
            for index, journal in enumerate(journals):
                if caught_up[index] is None and _position(journal.sample()) >= final_head:
                    caught_up[index] = time.monotonic() - ended
            time.sleep(0.05)
        recovering = None
        if subscriber is not None:
            got = subscriber.expect("result", ended + settings.catch_up + 30)
            recovering = _recovering(got, final_head - head_before)
        after = [journal.sample() for journal in journals]  # after the subscriber's last recoveries: it counts them
    finally:
        for child in children:
            child.stop()
        for journal in journals:
            journal.child.stop(30)
        server.stop()
    duration = ended - start
    sequenced = (head_end - head_start) / duration
    results = []
    for journal, before, at_end, settled, catch_up in zip(journals, first, last, after, caught_up):
        results.append({
            "journal": journal.name,
            "journaled_per_s": (at_end["fyrehose_journal_written_total"]
                                - before["fyrehose_journal_written_total"]) / duration,
            "lag_messages_at_end": max(0.0, head_end - _position(at_end)),
            "lag_seconds_at_end": max(0.0, head_end - _position(at_end)) / sequenced if sequenced > 0 else 0.0,
            "journal_lag_seconds_at_end": at_end["fyrehose_journal_lag_seconds"],
            "max_lag_seconds": max(journal.max_lag_s, at_end["fyrehose_journal_lag_seconds"]),
            "catch_up_s": catch_up,
            "permanent_loss": settled["fyrehose_journal_lost_total"],
            "written": settled["fyrehose_journal_written_total"],
            "forwarded": settled["fyrehose_journal_forwarded_total"],
        })
    return {"rate": settings.rate, "offered_per_s": sent / settings.duration,
            "sequenced_per_s": sequenced, "head": final_head, "journals": results, "subscriber": recovering}


def _recovering(result: dict, published: float) -> dict:
    """The recovering subscriber's figures: what reached it first time, what the journals filled, what never came."""
    recovered = result["anomalies"]["recovered frames"]
    times = result["recoveries"]
    recovery_p50, recovery_p99 = stats.recovery_ms(times)
    latency_p50, _, _ = stats.latency_ms(array.array("q", result["latencies"]))
    return {"received": result["received"], "recovered": recovered, "holes_filled": len(times),
            "latency_p50_ms": latency_p50, "requests": result["anomalies"]["REQUESTs"],
            "missing": max(0.0, published - result["received"] - recovered), "recovery_p50_ms": recovery_p50,
            "recovery_p99_ms": recovery_p99, "recovery_max_ms": max(times) * 1e3 if times else None}


def run_rounds(settings: JournalSettings, workdir: Path) -> list[dict]:
    steps = []
    for number in range(1, settings.rounds + 1):
        step = measure_step(settings, workdir / f"round-{number}")
        steps.append(step)
        worst = max(step["journals"], key=lambda j: (j["permanent_loss"], j["lag_messages_at_end"]))
        print(f"round {number}/{settings.rounds}: offered {step['offered_per_s']:,.0f}/s, sequenced "
              f"{step['sequenced_per_s']:,.0f}/s; worst journal {worst['journaled_per_s']:,.0f} msgs/s, lag "
              f"{worst['lag_messages_at_end']:,.0f} msgs / {worst['lag_seconds_at_end']:.2f} s at the end, "
              f"{worst['permanent_loss']:,.0f} lost", file=sys.stderr, flush=True)
        if step["subscriber"] is not None:
            print(f"round {number}/{settings.rounds}: recovering subscriber: "
                  f"{_subscriber_line(step['subscriber'])}", file=sys.stderr, flush=True)
    return steps


def _subscriber_line(sub: dict) -> str:
    if sub["recovery_p50_ms"] is None:
        times = "no hole filled"
    else:
        times = (f"recovery p50/p99/max {sub['recovery_p50_ms']:.1f} / {sub['recovery_p99_ms']:.1f} / "
                 f"{sub['recovery_max_ms']:.1f} ms")
    late = "" if sub["latency_p50_ms"] is None else f", its delivery latency p50 {sub['latency_p50_ms']:.1f} ms"
    return (f"{sub['received']:,.0f} received{late}, {sub['recovered']:,.0f} recovered from the journals in "
            f"{sub['holes_filled']:,} holes ({sub['requests']:,} REQUESTs), {times}, {sub['missing']:,.0f} never "
            f"received")


def document(settings: JournalSettings, machine: dict, steps: list[dict]) -> dict:
    journals = []
    for index in range(settings.journals):
        per_round = [step["journals"][index] for step in steps]
        journals.append({
            "journal": per_round[0]["journal"],
            **{key: stats.median([r[key] for r in per_round]) for key in (
                "journaled_per_s", "lag_messages_at_end", "lag_seconds_at_end", "journal_lag_seconds_at_end",
                "max_lag_seconds", "catch_up_s")},
            "caught_up_rounds": sum(r["catch_up_s"] is not None for r in per_round),
            "permanent_loss": max(r["permanent_loss"] for r in per_round),  # the worst round: loss is never averaged
        })
    return {
        "machine": machine,
        "settings": {"journals": settings.journals, "publishers": settings.publishers, "payload": settings.payload,
                     "duration": settings.duration, "rate": settings.rate, "rounds": settings.rounds,
                     "catch_up": settings.catch_up, "fsync": settings.fsync, "backbone": "fyrehose-single",
                     "drop_every": settings.drop_every},
        "offered_per_s": stats.median([s["offered_per_s"] for s in steps]),
        "sequenced_per_s": stats.median([s["sequenced_per_s"] for s in steps]),
        "journals": journals,
        "subscriber": _worst_subscriber([s["subscriber"] for s in steps if s["subscriber"] is not None]),
        "rounds": steps,
    }


def _worst_subscriber(rounds: list[dict]) -> dict | None:
    """The recovering subscriber's round with the most messages missing, then the slowest recovery: never a median."""
    if not rounds:
        return None
    return max(rounds, key=lambda sub: (sub["missing"], sub["recovery_max_ms"] or 0.0))


def write_table(doc: dict, out: TextIO) -> None:
    settings = doc["settings"]
    rate = "as fast as the publishers can" if settings["rate"] is None else f"{settings['rate']:,.0f} msgs/s offered"
    out.write(f"journals on the single-process backbone: {rate}, {settings['payload']} B payloads, "
              f"{settings['duration']:g} s, fsync {settings['fsync']}, median of {settings['rounds']} round(s)\n")
    out.write(f"offered {doc['offered_per_s']:,.0f} msgs/s, sequenced by the backbone {doc['sequenced_per_s']:,.0f} "
              f"msgs/s\n")
    out.write(f"{'journal':<12} {'journaled msgs/s':>17} {'lag msgs':>10} {'lag s':>7} {'own lag s':>10} "
              f"{'max own lag s':>14} {'catch-up s':>11} {'permanent loss':>15}\n")
    for journal in doc["journals"]:
        catch_up = "-" if journal["catch_up_s"] is None else f"{journal['catch_up_s']:.2f}"
        out.write(f"{journal['journal']:<12} {journal['journaled_per_s']:>17,.0f} "
                  f"{journal['lag_messages_at_end']:>10,.0f} {journal['lag_seconds_at_end']:>7.2f} "
                  f"{journal['journal_lag_seconds_at_end']:>10.2f} {journal['max_lag_seconds']:>14.2f} {catch_up:>11} "
                  f"{journal['permanent_loss']:>15,.0f}\n")
    out.write("lag: at the end of publishing, behind the backbone's HEAD (seconds: those messages at the rate the "
              "backbone sequenced); own lag: the journal's fyrehose_journal_lag_seconds (a lower bound); catch-up: "
              "after publishing until the journal held everything (- : not within --catch-up); permanent loss: "
              "recorded in gaps.jsonl\n")
    if doc["subscriber"] is not None:
        out.write(f"subscriber dropping one DELIVER datagram in {settings['drop_every']} (backbone --recent-bytes 0; "
                  f"worst round): {_subscriber_line(doc['subscriber'])}\n")
