"""The bench's fyrehose subscribers recover holes as a real subscriber does, and time each one.

A hole is noticed when a datagram skips sequences; the subscriber's
:class:`~fyrehose.protocol.tracker.SequenceTracker` REQUESTs it (the receiver's
KEEPALIVE timer sends what the connection's ``poll`` returns) and records,
per hole filled, the time from noticing it to its last sequence's arrival:
the bench's recovery column.  A datagram that answers a REQUEST is kept out
of the scanner's count and latency samples, so "loss before recovery" and the
latency percentiles mean what they meant before subscribers recovered.

Pure apart from the clock it is handed: datagrams in, the tracker's state and
counts out.
"""
from __future__ import annotations

from collections.abc import Callable

from fyrehose.protocol import codec
from fyrehose.protocol.frame_run import FrameRun
from fyrehose.protocol.tracker import SequenceTracker


class HoleRecovery:
    def __init__(self, tracker: SequenceTracker) -> None:
        self.tracker = tracker
        self.recovered = 0  # frames that filled a REQUESTed hole
        self.strangers = 0  # datagrams from another address that answered no hole

    def take(self, datagram: bytes, clock: Callable[[], float]) -> bool:
        """Track one DELIVER datagram from the backbone; True when it answers a REQUEST (the scanner skips it)."""
        tracker = self.tracker
        step = len(datagram)
        first = _sequence(datagram, 0) if step >= codec.FRAME_HEADER else 0
        if step > codec.FRAME_HEADER and datagram[1:3] == (step - codec.FRAME_HEADER).to_bytes(2, "big"):
            if first and tracker.advance(first, 1):  # one frame continuing the stream: the common unbatched case
                return False
        else:
            step = codec.uniform_step(datagram, codec.DELIVER)
            if step and first:
                count = len(datagram) // step
                if codec.consecutive_u48(datagram, 3, step, count) == first and (
                        tracker.advance(first, count)
                        or tracker.buffer_run(FrameRun(first, count, step, datagram), clock()) is not None):
                    return False  # continues the stream, or (a hole open) lies beyond it, kept whole: one step
        spans, _ = codec.scan(datagram, codec.DELIVER)
        if not tracker.holes:  # out of order or skipping ahead: noticed here
            self._deliver(spans, clock())
            return False
        first = codec.consecutive_first(spans)
        answer = tracker.awaits_any(first, first + len(spans) - 1) if first else any(
            tracker.awaits(seq) for _, _, seq in spans)
        filled = tracker.fill_run(first, [b""] * len(spans), clock()) if first else None
        if filled is not None:
            taken = sum(high - low + 1 for low, high in filled[1])
        else:
            before = tracker.duplicates
            self._deliver(spans, clock())
            taken = len(spans) - (tracker.duplicates - before)
        if answer:
            self.recovered += taken
        return answer

    def take_peer(self, datagram: bytes, clock: Callable[[], float]) -> None:
        """A re-DELIVER from another address than the backbone's (a journal answering a REQUEST the backbone
        FORWARDed to it): only frames a hole awaits are taken, as a client takes a peer's; a datagram with none
        is a stranger's, counted."""
        tracker = self.tracker
        spans, _ = codec.scan(datagram, codec.DELIVER)
        first = codec.consecutive_first(spans)
        filled = tracker.fill_run(first, [b""] * len(spans), clock(), requested=True) if first else None
        if filled is not None:  # one step per hole, not per frame
            taken = sum(high - low + 1 for low, high in filled[1])
            if taken:
                self.recovered += taken
            else:
                self.strangers += 1
            return
        awaited = [span for span in spans if span[2] and tracker.awaits(span[2])]
        if not awaited:
            self.strangers += 1
            return
        before = tracker.duplicates
        self._deliver(awaited, clock())
        self.recovered += len(awaited) - (tracker.duplicates - before)

    def _deliver(self, spans: list[tuple[int, int, int]], now: float) -> None:
        deliver = self.tracker.deliver
        for _, _, seq in spans:
            if seq:
                deliver(seq, b"", now)


def _sequence(datagram: bytes, frame_start: int) -> int:
    return int.from_bytes(datagram[frame_start + 3:frame_start + codec.FRAME_HEADER], "big")
