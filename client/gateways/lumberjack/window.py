"""One Lumberjack connection as a pure state machine: bytes in, events out; publish progress in, acks out.

The driver feeds what the socket delivered to :meth:`AckWindow.feed` and gets
the events to publish, in order.  It publishes them (in that order) and reports
how many are done with :meth:`AckWindow.published`, which returns the ``A``
frames to send.  An ack therefore never runs ahead of publication: ``A N``
goes out only when every event up to ``N`` has been published.

Windows.  A ``W`` frame opens a window: the writer's statement of how many
events it means to send before it waits for an ack (docs/lumberjack.md).  As in
Logstash's beats input the window is advisory, the writer's business: a
logstash-forwarder style writer announces ``1W`` once and then streams ``1D``
frames with several windows' worth in flight while acks arrive, and Beats grow
and shrink the window between batches; none of that is refused.  What bounds
the unacknowledged events of a connection is the driver's byte limit, which
stops reading (TCP back-pressure) and never closes the connection.

Beats and go-lumber restart their sequence numbers at 1 in each window and
may send the next window before the previous one is acked (pipelining);
pylogbeat keeps counting across windows.  Both work because acks are given
per window, in order: when publishing completes events of several windows,
each of those windows gets one ack with the sequence of its last published
event, so a writer never sees an ack that mixes windows.  An ack carries the
version of the ``W`` frame of its window (Logstash does the same).  Acks go
out as events are published, so a partial window is acked as soon as what
arrived of it is published.

Rules a writer must follow, each a :class:`LumberjackError` when broken:
a data frame needs an open window, and within a window sequence numbers are
positive and strictly increase.

While events of a version-2 window wait for the backbone, :meth:`keepalive`
gives the ``A 0`` that Logstash sends so that Beats do not time out;
version-1 writers get none, since the protocol gives sequence 0 no meaning
(docs/lumberjack.md, "A (ack)").
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from fyrehose.gateways.lumberjack.protocol import (
    DEFAULT_MAX_COMPRESSED_BYTES,
    DEFAULT_MAX_EVENT_BYTES,
    VERSION_2,
    DataFrame,
    FrameDecoder,
    LumberjackError,
    WindowSize,
    encode_ack,
)


@dataclass(slots=True)
class _Window:
    version: int
    last_seq: int = 0


class AckWindow:
    def __init__(self, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
                 max_compressed_bytes: int = DEFAULT_MAX_COMPRESSED_BYTES) -> None:
        self.decoder = FrameDecoder(max_event_bytes, max_compressed_bytes)
        self._window: _Window | None = None
        self._unpublished: deque[tuple[_Window, int]] = deque()  # received, not yet published: (window, seq)

    @property
    def unacked(self) -> int:
        """Events handed out by :meth:`feed` and not yet acknowledged."""
        return len(self._unpublished)

    def feed(self, data: bytes) -> list[DataFrame]:
        """The events completed by ``data``, in order; raises LumberjackError on a protocol violation.

        Events before a violating frame in the same ``data`` are lost with it;
        the connection must be closed anyway, and nothing of it was acked.
        """
        events: list[DataFrame] = []
        for frame in self.decoder.feed(data):
            if isinstance(frame, WindowSize):
                self._window = _Window(frame.version)
                continue
            window = self._window
            if window is None:
                raise LumberjackError(f"data frame {frame.seq} before any window size frame")
            if frame.seq <= window.last_seq:
                raise LumberjackError(
                    f"sequence {frame.seq} after {window.last_seq} in the same window (must increase, from 1)")
            window.last_seq = frame.seq
            self._unpublished.append((window, frame.seq))
            events.append(frame)
        return events

    def published(self, count: int) -> bytes:
        """The acks for the next ``count`` events of :meth:`feed`, now published in order."""
        if count > len(self._unpublished):
            raise ValueError(f"{count} events published but only {len(self._unpublished)} were outstanding")
        acks: list[bytes] = []
        current: _Window | None = None
        seq = 0
        for _ in range(count):
            window, seq_done = self._unpublished.popleft()
            if window is not current:
                if current is not None:
                    acks.append(encode_ack(seq, current.version))
                current = window
            seq = seq_done
        if current is not None:
            acks.append(encode_ack(seq, current.version))
        return b"".join(acks)

    def keepalive(self) -> bytes:
        """``A 0`` while events of a version-2 window wait; otherwise nothing."""
        if self._unpublished and self._unpublished[0][0].version == VERSION_2:
            return encode_ack(0, VERSION_2)
        return b""
