"""Which side of a load test ran out of CPU in each phase: the backbone, the load generator, both, the host's
cores, or none.

A capacity search finds the rate at which *something* stopped keeping up.
Where the Locust processes share the cores with the backbone, that is often
the load generator (its Python publishers and subscribers cost more per
message than the backbone does), and the rate found is then the generator's,
not the backbone's.  From the CPU counters sampled once a second (the
backbone's processes from its metrics endpoint, the Locust processes from
the operating system) this tells, per phase, how busy the busiest process of
each side was, what a sequenced message cost the backbone, and so which side
was the limit: a Python process runs on one core at most, and one busier
than :data:`SATURATED` of it is at its limit already (a single event loop,
Locust's gevent hub or the backbone's, then queues its work: its latency
grows faster than its throughput; a Locust process that can go no faster
measured 83-91 % here).  When no process is that busy but the host's cores
are (:data:`HOST_SATURATED` of all its CPU time, the kernel's network
processing included), the processes of both sides together used the machine
up: the rate found is the host's, and the generator belongs on other hosts.
A 2-core host that could go no faster measured 88-92 % busy: the hand-overs
between publishers, backbone and subscribers leave idle moments on a core
even when neither can take more work, so the host never reads 100 %.

Pure: samples and phase times in, figures out.
"""
from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass

from fyrehose.runtime.machine_cpu import busy_share

SATURATED = 0.8  # share of one core from which a process is the limit
HOST_SATURATED = 0.85  # share of all the host's CPU time from which its cores are the limit
BACKBONE_CPU = "fyrehose_process_cpu_seconds_total"
SEQUENCED = "fyrehose_pushes_total"


@dataclass(frozen=True)
class Sample:
    """One line of metrics.jsonl: CPU seconds so far of each backbone and each load-generator process, and of
    the host."""

    t: float  # unix seconds
    backbone_cpu: dict[str, float]  # process label -> CPU seconds
    sequenced: float | None  # messages the backbone sequenced so far
    generator_cpu: dict[str, float]  # Locust process name -> CPU seconds
    host_cpu: dict[str, float]  # psutil.cpu_times() field (user, idle, ...) -> seconds; empty in older files

    @classmethod
    def from_line(cls, line: dict) -> Sample:
        metrics = line.get("metrics") or {}
        backbone = {key[len(BACKBONE_CPU):]: _number(value) for key, value in metrics.items()
                    if key.startswith(BACKBONE_CPU)}
        sequenced = metrics.get(SEQUENCED)
        generator = {str(name): _number(value) for name, value in (line.get("generator_cpu_seconds") or {}).items()}
        host = {str(name): _number(value) for name, value in (line.get("host_cpu_seconds") or {}).items()}
        return cls(_number(line["t"]), backbone, None if sequenced is None else _number(sequenced), generator, host)


def _number(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"not a number: {value!r}")
    return float(value)


def read_samples(lines: Iterable[str]) -> list[Sample]:
    """The samples of metrics.jsonl's lines; a line that is not one (cut short, edited) is left out."""
    samples = []
    for text in lines:
        try:
            line = json.loads(text)
            samples.append(Sample.from_line(line))
        except (ValueError, TypeError, KeyError, AttributeError, ArithmeticError, RecursionError):
            continue  # ArithmeticError: a number too large for a float; RecursionError: nesting too deep
    return samples


@dataclass(frozen=True)
class PhaseLoad:
    backbone_busiest: float | None  # share of one core of the busiest backbone process
    generator_busiest: float | None  # the same for the busiest Locust process
    backbone_us_per_message: float | None  # CPU of all the backbone's processes per message it sequenced
    saturated: str  # "backbone", "load generator", "both", "host", "neither", or "unknown" without the samples
    host_busy: float | None = None  # share of all this host's CPU time that was busy (None: not sampled)
    generator_us_per_message: float | None = None  # CPU of all the Locust processes per message sequenced

    def as_dict(self) -> dict:
        return asdict(self)


def _busiest(first: dict[str, float], last: dict[str, float], seconds: float) -> float | None:
    """The highest share of one core any process used between two samples (processes in both only)."""
    shares = [(last[name] - first[name]) / seconds for name in first.keys() & last.keys()]
    return max(shares) if shares else None


def phase_load(samples: list[Sample], t_start: float, t_end: float) -> PhaseLoad:
    """The load of the samples taken within ``t_start..t_end`` (the first and the last of them are compared)."""
    inside = [sample for sample in samples if t_start <= sample.t <= t_end]
    if len(inside) < 2 or inside[-1].t <= inside[0].t:
        return PhaseLoad(None, None, None, "unknown")
    first, last = inside[0], inside[-1]
    seconds = last.t - first.t
    backbone = _busiest(first.backbone_cpu, last.backbone_cpu, seconds)
    generator = _busiest(first.generator_cpu, last.generator_cpu, seconds)
    cost = generator_cost = None
    if first.sequenced is not None and last.sequenced is not None and last.sequenced > first.sequenced:
        sequenced = last.sequenced - first.sequenced
        cost = _spent_per_message(first.backbone_cpu, last.backbone_cpu, sequenced)
        generator_cost = _spent_per_message(first.generator_cpu, last.generator_cpu, sequenced)
    host = busy_share(first.host_cpu, last.host_cpu) if first.host_cpu and last.host_cpu else None
    return PhaseLoad(backbone, generator, cost, _verdict(backbone, generator, host), host, generator_cost)


def _spent_per_message(first: dict[str, float], last: dict[str, float], messages: float) -> float | None:
    """µs of CPU that the processes sampled at both ends spent together per message; None if there are none."""
    both = first.keys() & last.keys()
    if not both:
        return None
    return sum(last[name] - first[name] for name in both) / messages * 1e6


def _verdict(backbone: float | None, generator: float | None, host: float | None) -> str:
    """A saturated process is named first, even when the other side's CPU is unknown (a remote backbone without
    metrics); only when none is, a host whose cores were all busy."""
    known = {side: share for side, share in (("backbone", backbone), ("load generator", generator)) if share is not None}
    saturated = [side for side, share in known.items() if share >= SATURATED]
    if len(saturated) == 2:
        return "both"
    if saturated:
        return saturated[0]
    if host is not None and host >= HOST_SATURATED:
        return "host"
    return "neither" if len(known) == 2 else "unknown"


def percent(share: float | None) -> str:
    """A share (of one core, or of the whole host) for the terminal: "35%", or "-" when not known."""
    return "-" if share is None else f"{share:.0%}"


def describe(load: PhaseLoad) -> str:
    """One line for the terminal: which side was the limit, and the busiest process of each."""
    limit = {"unknown": "not known (CPU samples missing)", "neither": "neither side saturated",
             "both": "both sides saturated", "host": "this host's cores saturated"}.get(
                 load.saturated, f"the {load.saturated} saturated")
    line = (f"the limit: {limit} (busiest backbone process {percent(load.backbone_busiest)} of a core, "
            f"busiest Locust process {percent(load.generator_busiest)}, host {percent(load.host_busy)} busy)")
    costs = [f"the {side} spent {value:.2f} us of CPU per message" for side, value in
             (("backbone", load.backbone_us_per_message), ("Locust processes", load.generator_us_per_message))
             if value is not None]
    if costs:
        line += "; " + ", ".join(costs)
    return line


def annotate(summary: dict, steps: list[dict], samples: list[Sample]) -> None:
    """Each phase's load into its steps.jsonl line (``load``); into the summary (``limit``), the load of the
    phase that ended the search (the first unsustained one), or None when every phase was sustained."""
    for step in steps:
        step["load"] = phase_load(samples, step["t_start"], step["t_end"]).as_dict()
    broken = summary.get("first_unsustained_phase")
    summary["limit"] = next((step["load"] for step in steps if broken and step["name"] == broken["name"]), None)
