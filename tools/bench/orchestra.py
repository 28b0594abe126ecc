"""Runs the measurement: steps, each target's search per round, the targets alternated round after round.

One *step* is one measurement of one target at one offered rate: a fresh
server, the subscribers (forked, each subscribed before anything is
published), the publishers (forked), a common start time a moment ahead,
``duration`` seconds of publishing, ``grace`` seconds more for the last
messages to arrive, and the CPU time of every process over the publishing
window.  A *round* measures every target once, in the order given, so the
targets alternate (A B C A B C ...) and slow drifts of the machine touch all
of them alike; figures are medians over rounds.
"""
from __future__ import annotations

import array
import collections
import multiprocessing
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.context import ForkContext
from pathlib import Path
from typing import Any, TypeVar

import psutil

from fyrehose.runtime.machine_cpu import busy_share, process_cpu_seconds
from fyrehose.tools.bench import stats
from fyrehose.tools.bench.loadgen import LoadSpec, publisher_main, subscriber_main
from fyrehose.tools.bench.search import RateSearch, StepOutcome
from fyrehose.tools.bench.servers import ServerProcess, server_for
from fyrehose.tools.bench.targets import BenchError, Target

SETTLE = 0.3  # between the last subscriber's confirmation and the start: multi-process tables catch up
READY_TIMEOUT = 20.0
RESULT_TIMEOUT = 30.0


@dataclass(frozen=True)
class BenchSettings:
    targets: list[Target]
    publishers: int
    subscribers: int
    payload: int
    duration: float
    rate: float | None  # None: search for the highest sustained rate
    latency_rate: float  # the fixed rate of the latency step when searching
    rounds: int
    search_steps: int
    grace: float
    workers: int | str  # --workers of the multi-process backbone: a count or "auto"
    fanout: int | None  # --fanout of the multi-process backbone (None: its default)
    trace: str | None = None  # a directory: single-process backbones write a stage trace of each step there
    server_cpus: tuple[int, ...] | None = None  # every target's server processes pinned to these CPUs
    generator_cpus: tuple[int, ...] | None = None  # the load generators pinned to these CPUs
    drop_every: int = 0  # fyrehose subscribers discard one DELIVER datagram in N, to measure recovery
    backbone_options: tuple[str, ...] = ()  # more options of every fyrehose backbone (--validate-addresses)


@dataclass
class StepResult:
    outcome: StepOutcome
    latencies_ns: array.array
    cpu: dict[str, float]  # percent of one core over the publishing window, by process
    machine_busy: float  # percent of all cores busy over that window, whoever used them (softirq included)
    anomalies: dict[str, int]  # summed over subscribers: see DeliverScanner
    recoveries: list[float] = field(default_factory=list)  # every subscriber's holes: seconds, noticed to filled


@dataclass
class RoundResult:
    """One target's figures from one round."""

    target: str
    rate: float | None  # asked of the reported step (None: as fast as the publishers could)
    offered: float
    delivered: float
    loss: float
    sustained: bool
    latency_rate: float | None  # the rate of the latency step (report.py reads None as no fixed rate)
    latency_loss: float
    p50_ms: float | None
    p99_ms: float | None
    p999_ms: float | None
    saturated: str
    cpu: dict[str, float]
    machine_busy: float
    overload_cpu: dict[str, float]
    steps: list[dict] = field(default_factory=list)
    holes: int = 0  # filled by the fyrehose subscribers during the reported step (see tools/bench/recovery.py)
    recovery_p50_ms: float | None = None  # those holes, noticed to filled
    recovery_p99_ms: float | None = None


Spec = TypeVar("Spec")  # what a load generator's main takes: a LoadSpec, or the client mode's ClientSpec


class _Child:
    """A forked load generator and its end of the pipe."""

    def __init__(self, context: ForkContext, name: str, main: Callable[[Connection, Spec], None], spec: Spec) -> None:
        self.name = name
        self.conn, child_end = context.Pipe()
        self.process = context.Process(target=main, args=(child_end, spec), name=name, daemon=True)
        self.process.start()
        child_end.close()

    def expect(self, kind: str, deadline: float) -> Any:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not self.conn.poll(remaining):
            raise BenchError(f"{self.name} did not report {kind!r} in time")
        try:
            message = self.conn.recv()
        except EOFError:
            raise BenchError(f"{self.name} exited (code {self.process.exitcode})") from None
        if message[0] == "error":
            raise BenchError(f"{self.name}: {message[1]}")
        return message[1]

    def stop(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join(5)
        self.conn.close()


def _pin(processes: dict[str, psutil.Process], cpus: tuple[int, ...] | None) -> None:
    """Pin every process to ``cpus`` (the same for every target, so peers are tuned alike)."""
    if cpus is None:
        return
    for name, process in processes.items():
        try:
            process.cpu_affinity(list(cpus))
        except psutil.NoSuchProcess:
            continue  # it exited; collecting its result reports why
        except (psutil.Error, ValueError, OSError) as exc:
            raise BenchError(f"cannot pin {name} to CPUs {','.join(map(str, cpus))}: {exc}") from None


def _load_generators(children: list[_Child]) -> dict[str, psutil.Process]:
    found = {}
    for child in children:
        try:
            found[child.name] = psutil.Process(child.process.pid)
        except psutil.Error:
            continue  # it failed already; collecting its result reports why
    return found


class StepRunner:
    subscriber_main: Callable[[Connection, LoadSpec], None] = staticmethod(subscriber_main)  # a subclass may swap it

    def __init__(self, settings: BenchSettings, binaries: dict[str, str], workdir: Path) -> None:
        self.settings = settings
        self.binaries = binaries
        self.workdir = workdir
        self.context = multiprocessing.get_context("fork")  # the orchestrator has no threads to copy
        self._steps = 0

    def server(self, target: Target) -> ServerProcess:
        self._steps += 1
        return server_for(target, self.binaries, self.workdir / f"step-{self._steps}-{target.name}",
                          self.settings.workers, self.settings.fanout,
                          Path(self.settings.trace) if self.settings.trace else None, self.settings.backbone_options)

    def run(self, target: Target, rate: float | None) -> StepResult:
        """One step; any failure is a BenchError naming the target."""
        try:
            return self._run(target, rate)
        except BenchError as exc:
            raise BenchError(f"{target.name}: {exc}") from None

    def _run(self, target: Target, rate: float | None) -> StepResult:
        settings = self.settings
        server = self.server(target).start()
        children: list[_Child] = []
        try:
            subscriber_spec = LoadSpec(target.protocol, server.address, settings.payload, batch=target.batch,
                                       drop_every=settings.drop_every)
            subscribers = [self._spawn(f"subscriber-{n}", self.subscriber_main, subscriber_spec, children)
                           for n in range(1, settings.subscribers + 1)]
            self._expect_all(subscribers, "ready")
            per_publisher = None if rate is None else rate / settings.publishers
            publisher_spec = LoadSpec(target.protocol, server.address, settings.payload, rate=per_publisher)
            publishers = [self._spawn(f"publisher-{n}", publisher_main, publisher_spec, children)
                          for n in range(1, settings.publishers + 1)]
            self._expect_all(publishers, "ready")
            _pin(server.processes(), settings.server_cpus)  # a multi-process backbone's later workers inherit it
            _pin(_load_generators(children), settings.generator_cpus)
            start = time.monotonic() + SETTLE
            end = start + settings.duration
            deadline = end + settings.grace
            for child in children:
                child.conn.send(("start", start, end, deadline))
            processes = server.processes()
            processes.update(_load_generators(children))
            time.sleep(max(0.0, start - time.monotonic()))
            before, machine_before, began = process_cpu_seconds(processes), psutil.cpu_times(), time.monotonic()
            time.sleep(max(0.0, end - time.monotonic()))
            processes.update(server.processes())  # workers a multi-process backbone started meanwhile
            after, machine_after, ended = process_cpu_seconds(processes), psutil.cpu_times(), time.monotonic()
            results_by = time.monotonic() + settings.grace + RESULT_TIMEOUT
            sent = sum(child.expect("result", results_by)["sent"] for child in publishers)
            received = [child.expect("result", results_by) for child in subscribers]
            if not server.alive():
                raise BenchError(f"the server exited during the step: {server.log_tail()}")
        finally:
            for child in children:
                child.stop()
            server.stop()
        wall = ended - began
        cpu = {name: 100.0 * (after[name] - before.get(name, 0.0)) / wall for name in after}
        machine_busy = 100.0 * busy_share(machine_before._asdict(), machine_after._asdict())
        return self._result(rate, sent, received, cpu, machine_busy)

    def _spawn(self, name: str, main: Callable[[Connection, LoadSpec], None], spec: LoadSpec,
               children: list[_Child]) -> _Child:
        child = _Child(self.context, name, main, spec)
        children.append(child)
        return child

    @staticmethod
    def _expect_all(children: list[_Child], kind: str) -> None:
        deadline = time.monotonic() + READY_TIMEOUT
        for child in children:
            child.expect(kind, deadline)

    def _result(self, rate: float | None, sent: int, received: list[dict], cpu: dict[str, float],
                machine_busy: float) -> StepResult:
        duration = self.settings.duration
        if not sent:
            raise BenchError("the publishers sent nothing")
        counts = [result["received"] for result in received]
        latencies = array.array("q")
        for result in received:
            latencies.frombytes(result["latencies"])
        outcome = StepOutcome(
            rate=rate,
            offered=sent / duration,
            delivered=sum(counts) / len(counts) / duration,
            loss=max(0.0, max(1.0 - count / sent for count in counts)),
        )
        anomalies: collections.Counter[str] = collections.Counter()
        for result in received:
            anomalies.update(result["anomalies"])
        recoveries = [seconds for result in received for seconds in result.get("recoveries", ())]
        return StepResult(outcome, latencies, cpu, machine_busy, dict(anomalies), recoveries)


def _describe(target: Target, step: StepResult) -> str:
    outcome = step.outcome
    asked = "max" if outcome.rate is None else f"{outcome.rate:,.0f}/s"
    busiest = ", ".join(f"{name} {share:.0f}%" for name, share in
                        sorted(step.cpu.items(), key=lambda item: -item[1])[:3])
    verdict = "sustained" if outcome.sustained else "not sustained"
    anomalies = "".join(f"; {count} {name}" for name, count in step.anomalies.items() if count)
    return (f"{target.name}: asked {asked}, offered {outcome.offered:,.0f}/s, delivered "
            f"{outcome.delivered:,.0f}/s per subscriber, loss {outcome.loss:.3%} ({verdict}; CPU {busiest}; "
            f"machine {step.machine_busy:.0f}% busy{anomalies})")


def _step_record(step: StepResult) -> dict:
    outcome = step.outcome
    return {"rate": outcome.rate, "offered_per_s": outcome.offered, "delivered_per_sub_per_s": outcome.delivered,
            "loss": outcome.loss, "sustained": outcome.sustained, "cpu_percent": step.cpu,
            "machine_busy_percent": step.machine_busy,
            "anomalies": step.anomalies}


def _saturated(step: StepResult) -> str:
    """What gave out first, judged on the step that shows it (see RateSearch.first_overload).

    A fixed rate that was sustained overloaded nothing, whatever else kept the
    machine busy meanwhile.
    """
    if step.outcome.rate is not None and step.outcome.sustained:
        return "none"
    return stats.saturated_process(step.cpu, step.machine_busy)


def measure_round(runner: StepRunner, target: Target, label: str) -> RoundResult:
    """One target's figures for one round: the throughput step(s), then the latency step."""
    settings = runner.settings
    steps: list[StepResult] = []

    def step(rate: float | None) -> StepResult:
        result = runner.run(target, rate)
        steps.append(result)
        print(f"{label} {_describe(target, result)}", file=sys.stderr, flush=True)
        return result

    if settings.rate is not None:
        reported = overload = latency = step(settings.rate)
    else:
        search = RateSearch(settings.search_steps)
        while not search.done:
            search.record(step(search.rate).outcome)
        reported = next(result for result in steps if result.outcome is search.best())
        overload = next(result for result in steps if result.outcome is search.first_overload())
        latency = step(settings.latency_rate)
    p50, p99, p999 = stats.latency_ms(latency.latencies_ns)
    recovery_p50, recovery_p99 = stats.recovery_ms(reported.recoveries)
    return RoundResult(
        target=target.name,
        rate=reported.outcome.rate,
        offered=reported.outcome.offered,
        delivered=reported.outcome.delivered,
        loss=reported.outcome.loss,
        sustained=reported.outcome.sustained,
        latency_rate=latency.outcome.rate,
        latency_loss=latency.outcome.loss,
        p50_ms=p50,
        p99_ms=p99,
        p999_ms=p999,
        saturated=_saturated(overload),
        cpu=reported.cpu,
        machine_busy=reported.machine_busy,
        overload_cpu=overload.cpu,
        steps=[_step_record(result) for result in steps],
        holes=len(reported.recoveries),
        recovery_p50_ms=recovery_p50,
        recovery_p99_ms=recovery_p99,
    )


def run_rounds(settings: BenchSettings, binaries: dict[str, str], workdir: Path) -> dict[str, list[RoundResult]]:
    runner = StepRunner(settings, binaries, workdir)
    rounds: dict[str, list[RoundResult]] = {target.name: [] for target in settings.targets}
    for number in range(1, settings.rounds + 1):
        for target in settings.targets:
            rounds[target.name].append(measure_round(runner, target, f"round {number}/{settings.rounds}"))
    return rounds


def preflight(settings: BenchSettings, binaries: dict[str, str], workdir: Path) -> None:
    """Start and stop each target's server once, so a target that cannot run fails before any measuring."""
    runner = StepRunner(settings, binaries, workdir)
    for target in settings.targets:
        try:
            runner.server(target).start().stop()
        except BenchError as exc:
            raise BenchError(f"{target.name}: {exc}") from None
