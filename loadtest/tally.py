"""Counts and latency histograms per load phase, mergeable across users and Locust processes.

Each Locust process keeps one :class:`RunTally`; workers send theirs to the
master as plain dicts (Locust's messages are msgpack), where they are merged.
Latencies are kept as histograms of values rounded to two significant digits
(the same bucketing this package installs into Locust's own statistics, but
fine enough for the sub-millisecond round trips of a loopback backbone).
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field, fields


def bucket_ms(value: float) -> float:
    """``value`` rounded to two significant digits: 0.347 -> 0.35, 147 -> 150, 3432 -> 3400."""
    return float(f"{max(value, 0.0):.2g}")


@dataclass
class Histogram:
    counts: Counter = field(default_factory=Counter)

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def add(self, value_ms: float, count: int = 1) -> None:
        """``count`` samples of ``value_ms`` (a run of messages released together has one latency)."""
        self.counts[bucket_ms(value_ms)] += count

    def merge(self, other: Histogram) -> None:
        self.counts.update(other.counts)

    def percentile(self, fraction: float) -> float | None:
        """The bucket that ``fraction`` of the samples stay within, computed as Locust computes its percentiles."""
        total = self.total
        if not total:
            return None
        below = int(total * fraction)
        remaining = total
        for value in sorted(self.counts, reverse=True):
            remaining -= self.counts[value]
            if remaining <= below:
                break
        return value

    def to_pairs(self) -> list[list[float]]:
        return [[value, count] for value, count in self.counts.items()]

    @classmethod
    def from_pairs(cls, pairs: Iterable[Iterable[float]]) -> Histogram:
        return cls(Counter({float(value): int(count) for value, count in pairs}))


@dataclass
class PhaseTally:
    """What happened to the messages of one phase.

    Publisher side: ``pushes`` (publish requests, CONFIRMed or not),
    ``push_failures``, the messages they carried (``messages``, of which
    ``message_failures`` in failed requests) and the publish-to-confirm
    histogram.  Subscriber side, summed over subscribers,
    every sequence a subscriber should have seen is in exactly one of
    ``direct`` (delivered by the backbone), ``recovered`` (re-delivered by
    another client after a REQUEST), ``lost`` (given up) or ``pending`` (still
    missing, not yet given up); ``receivers`` counts the subscribers that saw
    the phase at all.
    """

    pushes: int = 0
    push_failures: int = 0
    messages: int = 0
    message_failures: int = 0
    push_ms: Histogram = field(default_factory=Histogram)
    direct: int = 0
    recovered: int = 0
    lost: int = 0
    pending: int = 0
    receivers: int = 0
    deliver_ms: Histogram = field(default_factory=Histogram)

    @property
    def expected(self) -> int:
        return self.direct + self.recovered + self.lost + self.pending

    def merge(self, other: PhaseTally) -> None:
        for item in fields(self):
            mine = getattr(self, item.name)
            if isinstance(mine, Histogram):
                mine.merge(getattr(other, item.name))
            else:
                setattr(self, item.name, mine + getattr(other, item.name))

    def to_dict(self) -> dict:
        return {
            item.name: value.to_pairs() if isinstance(value := getattr(self, item.name), Histogram) else value
            for item in fields(self)
        }

    @classmethod
    def from_dict(cls, data: dict) -> PhaseTally:
        tally = cls()
        for item in fields(cls):
            if item.name not in data:
                continue
            current = getattr(tally, item.name)
            value = data[item.name]
            setattr(tally, item.name, Histogram.from_pairs(value) if isinstance(current, Histogram) else int(value))
        return tally


class RunTally(dict):
    """phase index -> :class:`PhaseTally`; missing phases appear empty on first use."""

    def __missing__(self, index: int) -> PhaseTally:
        self[index] = tally = PhaseTally()
        return tally

    def merge(self, other: RunTally) -> RunTally:
        for index, tally in other.items():
            self[index].merge(tally)
        return self

    def to_dict(self) -> dict[str, dict]:
        return {str(index): tally.to_dict() for index, tally in self.items()}

    @classmethod
    def from_dict(cls, data: dict) -> RunTally:
        return cls({int(index): PhaseTally.from_dict(tally) for index, tally in data.items()})

    def total(self) -> PhaseTally:
        """All phases together."""
        combined = PhaseTally()
        for tally in self.values():
            combined.merge(tally)
        return combined
