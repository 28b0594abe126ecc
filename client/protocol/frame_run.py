"""Consecutive DELIVER frames, kept as the datagram that brought them.

A BATCH subscriber's datagram from the backbone is usually hundreds of frames
whose sequence numbers continue the stream, often all of one size.  A
subscriber that measures or journals rather than hands each message to an
application (the load test's) keeps such a datagram whole: one object, one
journal entry and one accounting step per datagram instead of per message.
A client keeps datagrams of frames of varied sizes whole too (``step`` 0,
the frames' places in ``spans``), so a backlog waiting for its reader is a
few objects per datagram rather than one per message.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from fyrehose.protocol import codec


@dataclass(frozen=True, slots=True)
class FrameRun:
    first: int  # the sequence of the first frame; frame i is first + i
    count: int
    step: int  # bytes per frame, header included; 0: frames of varied sizes, placed by ``spans``
    data: bytes  # the frames back to back, as the backbone sent them
    spans: list[tuple[int, int, int]] | None = None  # with step 0: (start, end, sequence) of each frame (codec.scan)

    @property
    def last(self) -> int:
        return self.first + self.count - 1

    def payload(self, seq: int) -> bytes:
        if self.spans is not None:
            start, end, _ = self.spans[seq - self.first]
            return self.data[start + codec.FRAME_HEADER:end]
        start = (seq - self.first) * self.step
        return self.data[start + codec.FRAME_HEADER:start + self.step]

    def payloads(self) -> list[bytes]:
        """Every frame's payload, in order."""
        data, header = self.data, codec.FRAME_HEADER
        if self.spans is not None:
            return [data[start + header:end] for start, end, _ in self.spans]
        step = self.step
        return [data[start + header:start + step] for start in range(0, len(data), step)]

    def messages(self, from_seq: int | None = None, to_seq: int | None = None) -> Iterator[tuple[int, bytes]]:
        """(sequence, payload) of the frames in ``from_seq..to_seq`` (all by default), ascending.

        A part is sliced in one pass as the whole is, not a method call per frame (which the
        interpreter makes faster than compiled code does: docs/benchmarks.md).
        """
        if from_seq is None and to_seq is None:  # the whole run: its payloads sliced in one pass
            return zip(range(self.first, self.last + 1), self.payloads())
        low = self.first if from_seq is None else max(from_seq, self.first)
        high = self.last if to_seq is None else min(to_seq, self.last)
        data, header, sequences = self.data, codec.FRAME_HEADER, range(low, high + 1)  # zip stops with the range
        if self.spans is not None:
            return zip(sequences, [data[start + header:end]
                                   for start, end, _ in self.spans[low - self.first:high - self.first + 1]])
        step = self.step
        begin = (low - self.first) * step
        return zip(sequences, [data[start + header:start + step]
                               for start in range(begin, begin + len(sequences) * step, step)])
