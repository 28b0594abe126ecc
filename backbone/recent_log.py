"""The messages the backbone sequenced last, bounded in bytes: its own copy for last-resort re-delivery.

When the backbone's send buffer overflows, every subscriber misses the same
DELIVERs and no journaling client holds them to answer a REQUEST.  The
backbone still has them for a while: this log copies the sequenced DELIVER
datagrams into one byte ring, oldest overwritten first, and returns the
frames of a range.

A byte ring and an index of plain integers, not the log entries themselves:
64 MiB of one-message datagrams would be a million objects for Python's
garbage collector to walk on every full collection, pauses of tens of
milliseconds on the sequencing path; a copy into the ring is one memcpy per
datagram.  The anonymous mapping costs memory only as it fills.

Pure: entries in, frames out.
"""
from __future__ import annotations

import bisect
import mmap
from array import array
from typing import NamedTuple

from fyrehose.backbone.pushes import LogEntry
from fyrehose.protocol import codec

DEFAULT_BYTES = 64 << 20
_HEADER = codec.FRAME_HEADER


class HeldDatagram(NamedTuple):
    """One sequenced DELIVER datagram as the log holds it: frames ``first`` .. ``first + count - 1``."""

    first: int
    count: int  # type: ignore[assignment]  # a field named count: mypy takes it for an override of tuple.count
    step: int  # the common frame size, 0 when sizes differ
    data: bytes

    @property
    def last(self) -> int:
        return self.first + self.count - 1

    def frames(self, from_seq: int, to_seq: int) -> list[bytes]:
        """Its frames in ``from_seq..to_seq``, each alone (for a subscriber without BATCH)."""
        bounds = LogEntry(memoryview(self.data), self.count, self.step).frame_bounds()
        low = max(from_seq, self.first) - self.first
        high = min(to_seq, self.last) - self.first
        return [self.data[start:end] for start, end in bounds[low:high + 1]]


class RecentLog:
    def __init__(self, max_bytes: int = DEFAULT_BYTES) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0  # held, ring space skipped at a wrap included
        self._ring = mmap.mmap(-1, max_bytes, flags=mmap.MAP_PRIVATE) if max_bytes else None
        self._view = memoryview(self._ring) if self._ring is not None else memoryview(b"")
        self._head = 0  # absolute position of the next byte written (grows without bound)
        # one element per entry, oldest first, from index _oldest on: its first sequence, absolute start,
        # length and frame step, in arrays of machine integers (nothing for the collector to traverse)
        self._firsts = array("q")
        self._starts = array("q")
        self._lengths = array("q")
        self._steps = array("q")
        self._counts = array("q")
        self._oldest = 0

    def __len__(self) -> int:
        return len(self._firsts) - self._oldest

    @property
    def first(self) -> int | None:
        """The oldest sequence still held."""
        return self._firsts[self._oldest] if len(self) else None

    def add(self, entries: list[LogEntry]) -> None:
        capacity = self.max_bytes
        if not capacity:
            return
        view = self._view
        starts = self._starts
        for entry in entries:
            data = entry.view
            size = len(data)
            if size > capacity:  # cannot be held: forget the rest too, so what is held stays one unbroken range
                self._oldest = len(starts)
                continue
            start = self._head
            offset = start % capacity
            if offset + size > capacity:  # never split: skip to the ring's start
                start += capacity - offset
                offset = 0
            end = start + size
            oldest = self._oldest
            while oldest < len(starts) and end - starts[oldest] > capacity:  # overwritten from here on
                oldest += 1
            self._oldest = oldest
            view[offset:offset + size] = data
            self._firsts.append(int.from_bytes(data[3:_HEADER], "big"))
            self._starts.append(start)
            self._lengths.append(size)
            self._steps.append(entry.step)
            self._counts.append(entry.count)
            self._head = end
        if self._oldest > len(starts) // 2:  # drop the forgotten front now and then: amortized O(1)
            for index in (self._firsts, starts, self._lengths, self._steps, self._counts):
                del index[:self._oldest]
            self._oldest = 0
        self.bytes = self._head - starts[self._oldest] if len(starts) > self._oldest else 0

    def drop_after(self, seq: int) -> None:
        """Forget the newest entries that begin above ``seq``: a pair member that stood down dropped their
        output, and their numbers must never be DELIVERed from here (their tags were forgotten: a retry gets
        another number)."""
        firsts = self._firsts
        while len(self) and firsts[-1] > seq:
            for index in (firsts, self._starts, self._lengths, self._steps, self._counts):
                index.pop()
        starts = self._starts
        if len(self):
            self._head = starts[-1] + self._lengths[-1]
            self.bytes = self._head - starts[self._oldest]
        else:
            self.bytes = 0

    def frames(self, from_seq: int, to_seq: int) -> list[tuple[int, memoryview]]:
        """(sequence, DELIVER frame) for every held sequence in ``from_seq..to_seq``, ascending.

        The frames are views of the ring: copy them before the next :meth:`add`.
        """
        firsts = self._firsts
        oldest = self._oldest
        if not len(self) or to_seq < firsts[oldest]:
            return []
        begin = max(oldest, bisect.bisect_right(firsts, from_seq, lo=oldest) - 1)
        capacity = self.max_bytes
        out = []
        for index in range(begin, len(firsts)):
            first = firsts[index]
            if first > to_seq:
                break
            offset = self._starts[index] % capacity
            region = self._view[offset:offset + self._lengths[index]]
            for seq, (lo, hi) in enumerate(LogEntry(region, 0, self._steps[index]).frame_bounds(), first):
                if seq > to_seq:
                    break
                if seq >= from_seq:
                    out.append((seq, region[lo:hi]))
        return out

    def datagram(self, seq: int) -> HeldDatagram | None:
        """A copy of the held datagram that carries ``seq`` (the oldest held one when ``seq`` is older); None
        beyond the newest."""
        firsts = self._firsts
        oldest = self._oldest
        if not len(self):
            return None
        index = max(oldest, bisect.bisect_right(firsts, seq, lo=oldest) - 1)
        if seq >= firsts[index] + self._counts[index]:  # past this one: the next, if any (numbers may skip)
            index += 1
            if index == len(firsts):
                return None
        first, count = firsts[index], self._counts[index]
        offset = self._starts[index] % self.max_bytes
        return HeldDatagram(first, count, self._steps[index], bytes(self._view[offset:offset + self._lengths[index]]))
