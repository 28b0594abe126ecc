"""One subscriber's account of the run: per phase, how each sequence arrived, or that it did not.

Pure.  A message is attributed to the phase it was published in (the time
stamped in its payload).  A sequence that never arrived has no payload, so it
is attributed by its number: to the phase whose first sequence (as seen by
this subscriber) is the nearest at or below it.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from itertools import groupby
from operator import itemgetter

from fyrehose.loadtest.stamp import published_ns
from fyrehose.loadtest.tally import RunTally

_seq = itemgetter(0)
_payload = itemgetter(1)


def attribute(from_seq: int, to_seq: int, first_seqs: dict[int, int]) -> dict[int, int]:
    """Split ``from_seq..to_seq`` (inclusive) among phases by their first sequence numbers.

    Phases may have been seen slightly out of order (a retried PUSH gets a late
    number), so the boundary of a phase is the lowest first sequence of it and
    every later phase.  Sequences below every boundary belong to the earliest
    phase; without any boundary nothing can be attributed.
    """
    bounds: list[tuple[int, int]] = []  # (lowest sequence, phase), phases ascending
    low = None
    for phase in sorted(first_seqs, reverse=True):
        low = first_seqs[phase] if low is None else min(low, first_seqs[phase])
        bounds.append((low, phase))
    bounds.reverse()
    counts: dict[int, int] = {}
    for position, (low, phase) in enumerate(bounds):
        start = from_seq if position == 0 else max(from_seq, low)
        end = to_seq if position + 1 == len(bounds) else min(to_seq, bounds[position + 1][0] - 1)
        if end >= start:
            counts[phase] = counts.get(phase, 0) + end - start + 1
    return counts


class DeliveryAccount:
    """Counts one subscriber's arrivals, losses and latencies into a :class:`RunTally`.

    ``phase_of`` maps a publish time (ns since the epoch) to a phase index, or
    None outside the run; messages without a load-test stamp are counted in
    ``foreign`` (once, on arrival) and otherwise ignored.

    Arrivals and releases come in runs of messages with one payload: a batch
    of ``--batch N`` is N copies of one stamp, so its phase and latency are
    the same for every message, and the stamp is decoded once per run, not
    once per message.
    """

    def __init__(self, phase_of: Callable[[int], int | None]) -> None:
        self._phase_of = phase_of
        self.tally = RunTally()
        self.first_seqs: dict[int, int] = {}
        self.foreign = 0

    def arrived(self, messages: Iterable[tuple[int, bytes]], direct: bool) -> None:
        """(sequence, payload)s that arrived for the first time: ``direct`` from the backbone, else re-delivered
        by a peer."""
        for payload, run in groupby(messages, _payload):
            seqs = list(map(_seq, run))
            published = published_ns(payload)
            if published is None:
                self.foreign += len(seqs)
                continue
            self.arrived_stamped(published, len(seqs), min(seqs), direct)

    def arrived_stamped(self, published: int, count: int, lowest: int, direct: bool) -> None:
        """``count`` messages stamped ``published``, the lowest numbered ``lowest``, arrived for the first time."""
        phase = self._phase_of(published)
        if phase is None:
            return
        tally = self.tally[phase]
        if direct:
            tally.direct += count
        else:
            tally.recovered += count
        first = self.first_seqs.get(phase)
        if first is None or lowest < first:
            self.first_seqs[phase] = lowest

    def released(self, payload: bytes, count: int, now_ns: int) -> float | None:
        """``count`` messages with ``payload`` reached the application in order; their publish-to-deliver latency
        in ms (None if not ours), taken into the phase's histogram once per message."""
        published = published_ns(payload)
        return None if published is None else self.released_stamped(published, count, now_ns)

    def released_stamped(self, published: int, count: int, now_ns: int) -> float | None:
        """:meth:`released` for messages whose stamp was read already."""
        phase = self._phase_of(published)
        if phase is None:
            return None
        latency = (now_ns - published) / 1e6
        self.tally[phase].deliver_ms.add(latency, count)
        return latency

    def lost(self, from_seq: int, to_seq: int) -> None:
        """Sequences given up after recovery failed."""
        for phase, count in attribute(from_seq, to_seq, self.first_seqs).items():
            self.tally[phase].lost += count

    def snapshot(self, pending: list[tuple[int, int]]) -> RunTally:
        """A copy of the tally with the still-missing ranges ``pending`` counted, and this subscriber as one receiver."""
        snapshot = RunTally().merge(self.tally)
        for from_seq, to_seq in pending:
            for phase, count in attribute(from_seq, to_seq, self.first_seqs).items():
                snapshot[phase].pending += count
        for tally in snapshot.values():
            tally.receivers = 1 if tally.expected else 0
        return snapshot
