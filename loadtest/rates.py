"""The offered message rate over time (the load shapes) and the pacing of one publisher within it.

Pure: times are seconds since the run started, passed in by the caller.  Every
Locust process builds the same schedule from the same options, so the
publishers of all workers together offer the schedule's rate without talking
to each other: each of N publishing users paces itself at ``rate / N``.
"""
from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, replace

SHAPES = ("constant", "step", "spike")
SPIKE_SPAN = (0.4, 0.6)  # the spike phase covers this fraction of the run
MAX_WAIT = 1.0  # a pacer never sleeps longer, so a truncated schedule is noticed within a second


@dataclass(frozen=True, slots=True)
class Phase:
    name: str
    start: float
    end: float
    rate: float  # messages per second offered by all publishers together
    cut_short: bool = False  # the schedule was stopped during this phase

    @property
    def duration(self) -> float:
        return self.end - self.start


class RateSchedule:
    """Contiguous phases from 0 to ``end``; no publishing outside them."""

    def __init__(self, phases: list[Phase]) -> None:
        if not phases:
            raise ValueError("a schedule needs at least one phase")
        position = 0.0
        for phase in phases:
            if phase.start != position or phase.end <= phase.start or phase.rate < 0:
                raise ValueError(f"phases must be contiguous from 0 with positive length: {phase}")
            position = phase.end
        self.phases = tuple(phases)
        self._ends = [phase.end for phase in phases]

    @property
    def end(self) -> float:
        return self.phases[-1].end

    def index_at(self, t: float) -> int | None:
        """The index of the phase running at ``t``; None before 0 and from ``end`` on."""
        if t < 0 or t >= self.end:
            return None
        return bisect.bisect_right(self._ends, t)

    def rate_at(self, t: float) -> float:
        index = self.index_at(t)
        return 0.0 if index is None else self.phases[index].rate

    def truncated(self, t: float) -> RateSchedule:
        """This schedule stopped at ``t`` (the step shape stops raising the rate once a step fails)."""
        if t >= self.end:
            return self
        kept = [phase for phase in self.phases if phase.start < t]
        if not kept:
            raise ValueError(f"cannot stop a schedule at {t} s, before it starts")
        if t < kept[-1].end:
            kept[-1] = replace(kept[-1], end=t, cut_short=True)
        return RateSchedule(kept)


def build_schedule(shape: str, rate: float, duration: float, step_time: float, spike_factor: float) -> RateSchedule:
    """The phases of ``shape``: one constant phase, rising steps of ``rate`` each, or a spike of ``spike_factor``."""
    if rate <= 0 or duration <= 0:
        raise ValueError("rate and duration must be positive")
    if shape == "constant":
        return RateSchedule([Phase("constant", 0.0, duration, rate)])
    if shape == "step":
        if step_time <= 0:
            raise ValueError("step time must be positive")
        count = math.ceil(duration / step_time - 1e-9)
        return RateSchedule([
            Phase(f"step {i + 1}", i * step_time, min((i + 1) * step_time, duration), rate * (i + 1))
            for i in range(count)
        ])
    if shape == "spike":
        if spike_factor <= 0:
            raise ValueError("spike factor must be positive")
        rise, fall = (fraction * duration for fraction in SPIKE_SPAN)
        return RateSchedule([
            Phase("before spike", 0.0, rise, rate),
            Phase("spike", rise, fall, rate * spike_factor),
            Phase("after spike", fall, duration, rate),
        ])
    raise ValueError(f"unknown shape {shape!r} (choose from {', '.join(SHAPES)})")


class Pacer:
    """Spaces the publishes of one user so that it offers ``rate`` messages per second.

    The caller passes the user's current rate (its share of the schedule's
    rate), so a schedule cut short takes effect at once.  A publish is due
    every ``1 / rate`` seconds; a user that falls behind (a slow round trip)
    catches up at most ``slack`` seconds of backlog, so the offered load never
    bursts far above the schedule.
    """

    def __init__(self, start: float, slack: float = 0.05) -> None:
        self.due = start
        self.slack = slack

    def take(self, t: float, rate: float) -> bool:
        """True when a publish is due at ``t``; it is then counted as done."""
        if rate <= 0 or t < self.due:
            return False
        self.due = max(self.due + 1.0 / rate, t - self.slack)
        return True

    def wait(self, t: float, rate: float) -> float:
        """Seconds to sleep before the next :meth:`take` can succeed (at most MAX_WAIT)."""
        if rate <= 0:
            return MAX_WAIT
        return min(max(self.due - t, 0.0), MAX_WAIT)
