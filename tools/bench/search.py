"""The search for the highest rate a target sustains, as a pure state machine over step outcomes.

"Sustained" means: every subscriber received at least 99.9 % of what the
publishers sent (loss before recovery < 0.1 %) and the publishers really
offered the rate asked (at least 98 % of it).

The first step offers as much as the publishers can send.  A target that
loses nothing there is held back by its publishers or by TCP back-pressure,
and that step is its figure.  Otherwise the rate each subscriber got at
saturation is the first estimate of capacity, and every further step offers a
fixed rate: half as much again after a pass while no fixed rate has failed,
60 % after a failure while none has passed, and the midpoint once a pass and a
failure bracket the capacity.  docs/benchmarks.md explains why.
"""
from __future__ import annotations

from dataclasses import dataclass

LOSS_LIMIT = 0.001
OFFER_TOLERANCE = 0.98
STEP_UP = 1.5
STEP_DOWN = 0.6


@dataclass(frozen=True)
class StepOutcome:
    rate: float | None  # messages/s asked of the publishers in total; None = as fast as they can
    offered: float  # messages/s the publishers sent
    delivered: float  # messages/s each subscriber received (mean over subscribers)
    loss: float  # fraction the worst subscriber never received

    @property
    def sustained(self) -> bool:
        if self.loss >= LOSS_LIMIT:
            return False
        return self.rate is None or self.offered >= OFFER_TOLERANCE * self.rate


def fixed_rate(step: StepOutcome) -> float:
    """The rate of a step after the first: a number (only the first, unthrottled step has None)."""
    assert step.rate is not None, "a fixed step without a rate"
    return step.rate


class RateSearch:
    """Feed :meth:`record` the outcome of a step at :attr:`rate` until :attr:`done`."""

    def __init__(self, steps: int) -> None:
        if steps < 0:
            raise ValueError("the number of search steps cannot be negative")
        self.steps_left = steps
        self.rate: float | None = None  # the next step's rate; the first step is unthrottled
        self.done = False
        self.probe: StepOutcome | None = None
        self.fixed: list[StepOutcome] = []

    def record(self, outcome: StepOutcome) -> None:
        if self.done:
            raise RuntimeError("the search is over")
        if self.probe is None:
            self.probe = outcome
            if outcome.sustained or outcome.delivered <= 0 or not self.steps_left:
                self.done = True
            else:
                self.rate = outcome.delivered
            return
        self.fixed.append(outcome)
        self.steps_left -= 1
        if not self.steps_left:
            self.done = True
            return
        passed = [fixed_rate(step) for step in self.fixed if step.sustained]
        low = max(passed, default=None)
        high = min((fixed_rate(step) for step in self.fixed
                    if not step.sustained and (low is None or fixed_rate(step) > low)), default=None)
        if low is not None and high is not None:
            self.rate = (low + high) / 2
        elif low is not None:
            self.rate = low * STEP_UP
        else:
            assert high is not None  # no step passed, so the one just recorded failed
            self.rate = high * STEP_DOWN

    def best(self) -> StepOutcome:
        """The fastest sustained step; when none was, the gentlest failing one (its ``sustained`` is False)."""
        if self.probe is None:
            raise RuntimeError("no step recorded yet")
        passed = [step for step in self.fixed if step.sustained]
        if passed:
            return max(passed, key=lambda step: step.delivered)
        if self.probe.sustained or not self.fixed:
            return self.probe
        return min(self.fixed, key=fixed_rate)

    def first_overload(self) -> StepOutcome:
        """The step that shows what gave out first: the lowest fixed rate not sustained, else the unthrottled one."""
        failed = [step for step in self.fixed if not step.sustained]
        if failed:
            return min(failed, key=fixed_rate)
        if self.probe is None:
            raise RuntimeError("no step recorded yet")
        return self.probe
