"""Subscriber-side sequencing as a pure state machine: DELIVERs and time in, ordered events and REQUESTs out.

The backbone performs no error correction (docs/protocol.md), so each subscriber
orders what it receives, notices holes, asks for them again with growing
back-off, and after ``give_up_after`` seconds reports a hole as lost instead
of waiting forever.  Nothing is ever skipped silently: every sequence number
from the start position onwards comes out exactly once, either as a
:class:`Message` or inside a :class:`Lost` range.
"""
from __future__ import annotations

from array import array
from bisect import bisect_left
from dataclasses import dataclass, replace
from itertools import count, repeat, takewhile
from typing import Any, NamedTuple

from fyrehose.protocol.forwarding import FORWARD_RATE
from fyrehose.protocol.frame_run import FrameRun

MAX_RECOVERIES = 100_000


class Message(NamedTuple):
    """One message of the ordered stream (a named tuple: built by the hundred thousand per second)."""

    seq: int
    data: bytes


@dataclass(frozen=True, slots=True)
class Lost:
    """Sequences ``from_seq..to_seq`` (inclusive) that will never be delivered."""

    from_seq: int
    to_seq: int
    reason: str

    @property
    def count(self) -> int:
        return self.to_seq - self.from_seq + 1


Event = Message | Lost


NOT_RECOVERED = "not recovered"
GONE_LOST = "lost in a backbone takeover"  # the backbone's GONE: nobody holds these numbers
GONE_NEVER_SENT = "never sent (backbone takeover)"  # the backbone's GONE: these numbers never carried a message
_GIVEN_UP = float("-inf")


@dataclass(slots=True)
class _Hole:
    first: int
    last: int
    noticed: float  # when the hole was first seen; give-up time counts from here (-inf: the backbone said GONE)
    next_request: float
    attempts: int = 0
    reason: str = NOT_RECOVERED


def _hole_last(hole: _Hole) -> int:
    return hole.last


@dataclass(frozen=True, slots=True)
class TrackerOptions:
    """How a :class:`SequenceTracker` times its REQUESTs and give-ups, and how much it buffers (seconds, messages).

    ``request_delay`` lets reordered datagrams arrive before a hole is
    requested; retries back off from ``retry_initial`` to ``retry_max`` but
    never come before the answer could have been paced through at
    ``forward_rate`` messages/s (the responders' pacing), so a wide hole is
    not asked for twice while its first answer is still streaming in.
    ``give_up_after`` seconds after a hole was noticed it is reported lost.
    A REQUEST asks for at most ``max_request_span`` sequences.
    A hole learnt only from the backbone's HEAD waits ``head_delay``: its
    DELIVERs are usually just behind.  ``max_buffered`` bounds the
    out-of-order buffer: past it the oldest hole is given up early.
    When the backbone says it re-DELIVERs a range itself
    (:meth:`SequenceTracker.backbone_answers`), what is still missing of it is
    asked for again ``redelivery_retry`` seconds later, plus the time the
    range takes at ``redelivery_rate`` messages/s, with no back-off: the
    backbone answers at once, and a REQUEST it never got is the likelier failure.
    """

    request_delay: float = 0.02
    retry_initial: float = 0.1
    retry_max: float = 1.0
    give_up_after: float = 10.0
    max_request_span: int = 8192
    max_buffered: int = 1_000_000
    head_delay: float = 0.5
    forward_rate: float = FORWARD_RATE  # the responders' default pace
    redelivery_retry: float = 0.02
    redelivery_rate: float = 1_000_000

    def __post_init__(self) -> None:
        for name in ("request_delay", "head_delay", "redelivery_retry"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name} must be 0 or more seconds, not {getattr(self, name)!r}")
        for name in ("retry_initial", "give_up_after", "forward_rate", "redelivery_rate"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be more than 0, not {getattr(self, name)!r}")
        if not self.retry_max >= self.retry_initial:
            raise ValueError(f"retry_max ({self.retry_max!r} s) must not be below retry_initial "
                             f"({self.retry_initial!r} s): retries back off from the one to the other")
        for name in ("max_request_span", "max_buffered"):
            if not getattr(self, name) >= 1:
                raise ValueError(f"{name} must be at least 1 message, not {getattr(self, name)!r}")


DEFAULT_TRACKER_OPTIONS = TrackerOptions()


class SequenceTracker:
    def __init__(self, start: int | None = None, options: TrackerOptions = DEFAULT_TRACKER_OPTIONS,
                 **changes: Any) -> None:
        """``start`` is the first sequence wanted (None: whatever arrives first).

        ``options`` (:class:`TrackerOptions`) time the REQUESTs and give-ups;
        ``changes`` replace some of them by name (``SequenceTracker(1,
        give_up_after=1.0)``), validated the same way.
        """
        if changes:
            options = replace(options, **changes)
        self.options = options
        self.next: int | None = start  # the next sequence to hand out
        self.highest = 0 if start is None else start - 1  # highest sequence known to exist (once started)
        # copied into attributes: the hot paths read them per datagram
        self.request_delay = options.request_delay
        self.retry_initial = options.retry_initial
        self.retry_max = options.retry_max
        self.give_up_after = options.give_up_after
        self.max_request_span = options.max_request_span
        self.max_buffered = options.max_buffered
        self.head_delay = options.head_delay
        self.forward_rate = options.forward_rate
        self.redelivery_retry = options.redelivery_retry
        self.redelivery_rate = options.redelivery_rate
        self._buffer: dict[int, bytes] = {}
        self._runs: dict[int, FrameRun] = {}  # whole datagrams beyond a hole, by first sequence (buffer_run)
        self._run_messages = 0  # messages in those runs, counted against max_buffered
        self._holes: list[_Hole] = []  # disjoint, ascending, all below or at `highest`
        self.duplicates = 0
        self.lost = 0
        self.never_sent = 0  # numbers the backbone said never carried a message (reported as Lost, not counted lost)
        # seconds from noticing a hole to its last sequence's arrival, per hole filled (a split hole: per part),
        # for the bench's recovery figures; the first MAX_RECOVERIES only
        self.recoveries = array("d")

    @property
    def started(self) -> bool:
        return self.next is not None

    @property
    def holes(self) -> list[tuple[int, int]]:
        return [(h.first, h.last) for h in self._holes]

    def awaits(self, seq: int) -> bool:
        """Whether ``seq`` lies in a hole already REQUESTed and not yet filled.

        Only such a sequence may come from an address other than the
        backbone's (a journaling client answering a FORWARD); the client
        drops a stranger's DELIVER of anything else.
        """
        return self.awaits_any(seq, seq)

    def awaits_any(self, first: int, last: int) -> bool:
        """Whether any of ``first..last`` lies in a hole already REQUESTed and not yet filled."""
        holes = self._holes
        index = bisect_left(holes, first, key=_hole_last)  # the first hole not wholly below first
        while index < len(holes) and holes[index].first <= last:
            if holes[index].attempts:
                return True
            index += 1
        return False

    def deliver(self, seq: int, data: bytes, now: float) -> list[Event]:
        """Take one DELIVER; return the events now ready, in sequence order."""
        if self.next is None:
            self.next = seq
            self.highest = seq - 1
        if seq < self.next or seq in self._buffer:
            self.duplicates += 1
            return []
        if seq > self.highest:
            if seq > self.highest + 1:
                self._holes.append(_Hole(self.highest + 1, seq - 1, now, now + self.request_delay))
            self.highest = seq
        else:
            filled = self._fill(seq, now)
            if not filled:
                self.duplicates += 1
                return []
        if seq != self.next:
            self._buffer[seq] = data
            if len(self._buffer) + self._run_messages > self.max_buffered:
                return self._give_up_front("buffer full")
            return []
        events: list[Event] = [Message(seq, data)]
        self.next = seq + 1
        self._drain(events)
        return events

    def deliver_run(self, first: int, payloads: list[bytes]) -> list[Event] | None:
        """Take DELIVERs ``first``, ``first + 1``, ... that continue the stream exactly, in one step.

        A backbone datagram in BATCH mode usually is such a run; when this one
        is not (a hole is open, or it starts elsewhere) the answer is None and
        the caller takes the DELIVERs one by one with :meth:`deliver`.
        """
        if not self.advance(first, len(payloads)):
            return None
        # tuple.__new__ builds the same named tuples as Message(seq, data) without a Python call for each
        return list(map(tuple.__new__, repeat(Message), zip(range(first, first + len(payloads)), payloads)))

    def advance(self, first: int, count: int) -> bool:
        """:meth:`deliver_run` for a caller that keeps the payloads itself: whether ``first`` .. ``first + count
        - 1`` continued the stream exactly (and were taken as released), or nothing changed."""
        if self.next is None:
            self.next = first
            self.highest = first - 1
        if first != self.next or self._holes or self._buffer:
            return False
        self.next = first + count
        self.highest = first + count - 1
        return True

    def buffer_run(self, run: FrameRun, now: float) -> list[Any] | None:
        """Keep a whole datagram beyond the highest sequence seen while a hole is open before it.

        For a driver that keeps datagrams whole (the journal): instead of one
        buffered message per frame, the datagram waits as it is and comes out
        as itself, in order, once the holes before it are filled or given up.
        A datagram that skips sequences opens a hole for them, as :meth:`deliver`
        does.  None when the datagram is not beyond the highest sequence (or
        continues it with nothing open: :meth:`advance` takes that); otherwise
        the events released meanwhile (a give-up when the buffer passed
        ``max_buffered``), FrameRuns among them.

        (Typed ``list[Any]``, not ``list[Event | FrameRun]``, because
        :class:`~fyrehose.protocol.connection.Incoming` keeps them in its
        ``events: list[Event]``.)
        """
        if self.next is None or run.first <= self.highest:
            return None
        if run.first > self.highest + 1:
            self._holes.append(_Hole(self.highest + 1, run.first - 1, now, now + self.request_delay))
        elif not self._holes:
            return None
        self._runs[run.first] = run
        self._run_messages += run.count
        self.highest = run.last
        if len(self._buffer) + self._run_messages > self.max_buffered:
            return self._give_up_front("buffer full")
        return []

    def deliver_ahead(self, first: int, payloads: list[bytes], now: float) -> list[Event] | None:
        """Take DELIVERs ``first``, ``first + 1``, ... that all lie beyond every sequence seen, in one step.

        While a hole is open the stream keeps arriving at its full rate; such
        a run is buffered (a hole opened before it if it skips sequences)
        without a Python step per message.  None when the run does not lie
        wholly beyond :attr:`highest` (the caller takes it one by one).
        """
        if self.next is None or first <= self.highest or not payloads:
            return None
        if first > self.highest + 1:
            self._holes.append(_Hole(self.highest + 1, first - 1, now, now + self.request_delay))
        last = first + len(payloads) - 1
        self.highest = last
        if first == self.next:  # no hole before it after all
            self.next = last + 1
            return list(map(tuple.__new__, repeat(Message), zip(range(first, last + 1), payloads)))
        self._buffer.update(zip(range(first, last + 1), payloads))
        if len(self._buffer) + self._run_messages > self.max_buffered:
            return self._give_up_front("buffer full")
        return []

    def fill_run(self, first: int, payloads: list[bytes], now: float, *,
                 requested: bool = False) -> tuple[list[Event], list[tuple[int, int]]] | None:
        """Take re-DELIVERs ``first``, ``first + 1``, ... that lie at or below :attr:`highest`, in one step per
        hole they fill instead of one per message (an answer to a REQUEST is whole datagrams of a hole).

        Returns the events now ready and the ranges taken (the rest were
        duplicates, counted as such); with ``requested`` only holes already
        REQUESTed take anything (a peer's answer: the caller counts the rest as
        a stranger's, not as duplicates).  None when the run reaches beyond
        :attr:`highest` (the caller takes it otherwise).
        """
        last = first + len(payloads) - 1
        if self.next is None or not payloads or last > self.highest:
            return None
        holes, buffer = self._holes, self._buffer
        taken: list[tuple[int, int]] = []
        index = bisect_left(holes, first, key=_hole_last)  # the first hole not wholly below the run
        while index < len(holes) and holes[index].first <= last:
            hole = holes[index]
            if requested and not hole.attempts:
                index += 1
                continue
            low, high = max(first, hole.first), min(last, hole.last)
            buffer.update(zip(range(low, high + 1), payloads[low - first:high - first + 1]))
            taken.append((low, high))
            if low == hole.first and high == hole.last:
                del holes[index]
                if len(self.recoveries) < MAX_RECOVERIES:
                    self.recoveries.append(now - hole.noticed)
                continue
            if low == hole.first:
                hole.first = high + 1
            elif high == hole.last:
                hole.last = low - 1
            else:
                holes.insert(index + 1, _Hole(high + 1, hole.last, hole.noticed, hole.next_request, hole.attempts))
                hole.last = low - 1
            index += 1
        if not requested:
            self.duplicates += len(payloads) - sum(high - low + 1 for low, high in taken)
        events: list[Event] = []
        if taken:
            self._drain(events)
            if len(buffer) + self._run_messages > self.max_buffered:
                events += self._give_up_front("buffer full")
        return events, taken

    def head(self, last_issued: int, now: float) -> None:
        """Learn the backbone's last issued sequence (from a KEEPALIVE-ACK) to notice lost tails."""
        if self.next is None or last_issued <= self.highest:
            return
        self._holes.append(_Hole(self.highest + 1, last_issued, now, now + max(self.request_delay, self.head_delay)))
        self.highest = last_issued

    def handle_timers(self, now: float) -> tuple[list[tuple[int, int]], list[Event]]:
        """Timers: the (from, to) ranges to REQUEST now, and events released by giving up holes."""
        events: list[Event] = []
        while self._holes and self._holes[0].noticed + self.give_up_after <= now:
            events.extend(self._give_up_front())
        requests = []
        span = self.max_request_span
        for hole in self._holes:
            if hole.next_request > now:
                continue
            for first in range(hole.first, hole.last + 1, span):
                requests.append((first, min(hole.last, first + span - 1)))
            hole.attempts += 1
            backoff = min(self.retry_initial * (2 ** (hole.attempts - 1)), self.retry_max)
            hole.next_request = now + max(backoff, (hole.last - hole.first + 1) / self.forward_rate)
        return requests, events

    def backbone_answers(self, from_seq: int, to_seq: int, now: float) -> None:
        """The backbone re-DELIVERs ``from_seq..to_seq`` itself: what is still missing of it is asked for again
        promptly instead of after the back-off."""
        for hole in self._holes:
            if hole.first > to_seq:
                break
            if hole.last < from_seq:
                continue
            span = min(hole.last, to_seq) - max(hole.first, from_seq) + 1
            hole.next_request = now + self.redelivery_retry + span / self.redelivery_rate

    def gone(self, from_seq: int, to_seq: int, never_sent: bool, now: float) -> list[Event]:
        """The backbone says nobody will deliver ``from_seq..to_seq`` (a GONE frame): what of it this tracker
        waits for is given up now, in order (a part behind an earlier hole goes once that hole is settled)."""
        reason = GONE_NEVER_SENT if never_sent else GONE_LOST
        if self.next is not None and to_seq > self.highest:  # told before the stream got there: like a HEAD
            self._holes.append(_Hole(self.highest + 1, to_seq, now, now + self.request_delay))
            self.highest = to_seq
        holes: list[_Hole] = []
        for hole in self._holes:
            low, high = max(hole.first, from_seq), min(hole.last, to_seq)
            if low > high:
                holes.append(hole)
                continue
            if hole.first < low:
                holes.append(_Hole(hole.first, low - 1, hole.noticed, hole.next_request, hole.attempts, hole.reason))
            holes.append(_Hole(low, high, _GIVEN_UP, float("inf"), hole.attempts, reason))
            if high < hole.last:
                holes.append(_Hole(high + 1, hole.last, hole.noticed, hole.next_request, hole.attempts, hole.reason))
        self._holes = holes
        events: list[Event] = []
        while holes and holes[0].noticed == _GIVEN_UP:
            events.extend(self._give_up_front())
            holes = self._holes
        return events

    def next_deadline(self) -> float | None:
        if not self._holes:
            return None
        return min(min(h.next_request for h in self._holes), self._holes[0].noticed + self.give_up_after)

    def _fill(self, seq: int, now: float) -> bool:
        """Remove ``seq`` from the hole holding it; False when no hole holds it.  A hole it closes counts in
        :attr:`recoveries`."""
        holes = self._holes
        for index, hole in enumerate(holes):  # noqa: B007 (index is used after the break)
            if hole.first <= seq <= hole.last:
                break
        else:
            return False
        if hole.first == hole.last:
            del holes[index]
            if len(self.recoveries) < MAX_RECOVERIES:
                self.recoveries.append(now - hole.noticed)
        elif seq == hole.first:
            hole.first += 1
        elif seq == hole.last:
            hole.last -= 1
        else:
            tail = _Hole(seq + 1, hole.last, hole.noticed, hole.next_request, hole.attempts)
            hole.last = seq - 1
            holes.insert(index + 1, tail)
        return True

    def _drain(self, events: list[Any]) -> None:
        """Append what is now in order: Messages, and the FrameRuns :meth:`buffer_run` kept, if any."""
        buffer, runs = self._buffer, self._runs
        seq = self.next
        while True:
            if seq in buffer:  # the consecutive ones at once, without a Python step per message
                ready = range(seq, seq + len(list(takewhile(buffer.__contains__, count(seq)))))
                events += map(tuple.__new__, repeat(Message), zip(ready, map(buffer.pop, ready)))
                seq = ready.stop
            elif runs and seq in runs:
                run = runs.pop(seq)
                self._run_messages -= run.count
                events.append(run)
                seq = run.last + 1
            else:
                break
        self.next = seq

    def _give_up_front(self, reason: str | None = None) -> list[Event]:
        hole = self._holes.pop(0)  # always starts at self.next: everything below it was drained
        events: list[Event] = []
        lost = Lost(hole.first, hole.last, reason or hole.reason)
        if lost.reason == GONE_NEVER_SENT:
            self.never_sent += lost.count
        else:
            self.lost += lost.count
        events.append(lost)
        self.next = hole.last + 1
        self._drain(events)
        return events
