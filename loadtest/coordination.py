"""How the Locust processes of one run agree on its course and pool their tallies.

Every process that runs users holds a :class:`ProcessRun` (its clock, its
schedule and its users' tallies) and sends its tally to the master once a
second as the custom message ``fyrehose:tally``.  The master (or the single
process of a local run) holds the :class:`Conductor`, which Locust's shape
class asks every second what to do: keep the users running, stop publishing
(``fyrehose:truncate``, when a step failed or the schedule ended), let the
subscribers recover for ``drain`` seconds, collect the final tallies
(``fyrehose:finish``), write steps.jsonl and summary.json, and stop.
A local runner delivers these messages to itself, so both modes share one path.
"""
from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Protocol

from fyrehose.loadtest.rates import RateSchedule
from fyrehose.loadtest.results import judge, judge_all, summarize
from fyrehose.loadtest.settings import LoadSettings
from fyrehose.loadtest.tally import RunTally
from fyrehose.runtime.durable import replace_atomically

TALLY = "fyrehose:tally"
TRUNCATE = "fyrehose:truncate"
FINISH = "fyrehose:finish"
LOCAL_NODE = "local"  # Locust's node id for the one process of a run without workers
TALLY_INTERVAL = 1.0
SETTLE = 0.5  # seconds after a phase ends and its last publish resolved, before its messages count
LEAD_IN = 1.0  # seconds from Locust's test start to the first phase: users start (and subscribe) meanwhile
FINISH_TIMEOUT = 10.0  # how long the conductor waits for the final tallies


class Finishable(Protocol):
    """A subscribing user: it gives up what is still missing when the run ends."""

    def finish(self) -> None: ...

    def snapshot(self) -> RunTally: ...


class ProcessRun:
    """This process's share of the run; times are unix seconds, phases count from ``anchor``."""

    def __init__(self, settings: LoadSettings, anchor: float) -> None:
        self.settings = settings
        self.anchor = anchor
        self.schedule = settings.schedule()
        self.publishes = RunTally()
        self.subscribers: list[Finishable] = []

    def elapsed(self) -> float:
        return time.time() - self.anchor

    def user_rate(self, elapsed: float) -> float:
        """What one publishing user offers at ``elapsed``."""
        return self.schedule.rate_at(elapsed) / self.settings.users

    def phase_of_ns(self, published_ns: int) -> int | None:
        return self.schedule.index_at(published_ns / 1e9 - self.anchor)

    def count_push(self, phase: int, response_ms: float, failed: bool, messages: int = 1) -> None:
        tally = self.publishes[phase]
        tally.pushes += 1
        tally.push_failures += failed
        tally.messages += messages
        tally.message_failures += messages if failed else 0
        if not failed:
            tally.push_ms.add(response_ms)

    def truncate(self, at: float) -> None:
        self.schedule = self.schedule.truncated(max(at - self.anchor, 1e-3))

    def finish(self) -> None:
        for subscriber in self.subscribers:
            subscriber.finish()

    def snapshot(self) -> RunTally:
        tally = RunTally().merge(self.publishes)
        for subscriber in self.subscribers:
            tally.merge(subscriber.snapshot())
        return tally

    def tally_message(self, final: bool) -> dict:
        return {"tally": self.snapshot().to_dict(), "sent_at": time.time(), "final": final}


class Conductor:
    """The master's view of the run; :meth:`tick` is the shape's decision, once a second."""

    def __init__(self, settings: LoadSettings, broadcast: Callable[[str, dict], None],
                 expected_nodes: Callable[[], set[str]]) -> None:
        self.settings = settings
        self.broadcast = broadcast
        self.expected_nodes = expected_nodes
        self.start(None)

    def start(self, anchor: float | None) -> None:
        """A new run begins at ``anchor`` (None: none yet)."""
        self.anchor = anchor
        self.schedule: RateSchedule = self.settings.schedule()
        self.reports: dict[str, dict] = {}
        self.judged = 0  # phases judged so far (the step shape judges while running)
        self.publish_end: float | None = None
        self.finish_deadline: float | None = None
        self.written = False

    def receive(self, node: str, message: dict) -> None:
        previous = self.reports.get(node)
        if previous is None or not previous["final"]:
            self.reports[node] = message

    def tally(self) -> RunTally:
        combined = RunTally()
        for message in self.reports.values():
            combined.merge(RunTally.from_dict(message["tally"]))
        return combined

    def handle_timers(self, now: float) -> bool:
        """Run what is due at ``now``; False once the run is over and its results are written."""
        if self.anchor is None:
            return True
        if self.publish_end is None:
            self._watch_publishing(now)
        elif self.finish_deadline is None:
            if now >= self.publish_end + self.settings.drain:
                self.finish_deadline = now + FINISH_TIMEOUT
                self.broadcast(FINISH, {})
        else:
            finals = {node for node, message in self.reports.items() if message["final"]}
            if finals >= self.expected_nodes() or now >= self.finish_deadline:
                self.write(complete=finals >= self.expected_nodes())
                return False
        return True

    def _watch_publishing(self, now: float) -> None:
        anchor = self.anchor
        assert anchor is not None  # tick watches only an anchored run
        elapsed = now - anchor
        if self.settings.shape == "step" and self._a_step_failed(now):
            self.schedule = self.schedule.truncated(max(elapsed, 1e-3))
            self.broadcast(TRUNCATE, {"at": now})
        if elapsed >= self.schedule.end:
            self.publish_end = anchor + self.schedule.end

    def settled_at(self, phase_end: float) -> float:
        """When the tallies of a phase ending at ``phase_end`` are complete.

        A publish started just before the end resolves (confirmed or failed) up
        to ``timeout`` later; judging earlier would miss its latency or its
        failure, and a step passed mid-run could fail in the final results.
        """
        return phase_end + self.settings.timeout + SETTLE

    def _a_step_failed(self, now: float) -> bool:
        """Judge every step whose publishes have resolved and whose messages have settled in every node's latest report."""
        if not self.reports:
            return False
        reported = min(message["sent_at"] for message in self.reports.values())
        anchor = self.anchor
        assert anchor is not None  # judged only while an anchored run publishes
        tally = None
        while self.judged < len(self.schedule.phases):
            index = self.judged
            phase = self.schedule.phases[index]
            if min(now, reported) < self.settled_at(anchor + phase.end):
                return False
            if tally is None:
                tally = self.tally()
            self.judged += 1
            if not judge(phase, tally[index], anchor, self.settings.p99_ms, final=False).sustained:
                return True
        return False

    def write(self, complete: bool) -> None:
        """steps.jsonl and summary.json in the settings' ``out`` directory (nothing without one)."""
        self.written = True
        if not self.settings.out or self.anchor is None:
            return
        tally = self.tally()
        results = judge_all(self.schedule, tally, self.anchor, self.settings.p99_ms, final=True)
        settings = self.settings
        run = {
            "shape": settings.shape,
            "users": settings.users,
            "subscribers": settings.subscribers,
            "batch": settings.batch,
            "workers": len(self.reports.keys() - {LOCAL_NODE}),  # those that reported, however they were started
            "rate": settings.rate,
            "duration_s": self.schedule.end,
            "backbone": settings.backbone,
            "size": settings.size,
            "p99_threshold_ms": settings.p99_ms,
            "started_at": self.anchor,
        }
        out = Path(settings.out)
        out.mkdir(parents=True, exist_ok=True)
        # replaced whole: readers (the CLI polling in web mode, the capacity report) never see half a file
        replace_atomically(out / "steps.jsonl",
                           "".join(json.dumps(asdict(result)) + "\n" for result in results).encode())
        replace_atomically(out / "summary.json",
                           (json.dumps(summarize(results, tally, run, complete), indent=2) + "\n").encode())
