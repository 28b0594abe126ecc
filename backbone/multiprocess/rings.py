"""Lock-free rings of variable-size records in shared memory, and the doorbells idle readers sleep on.

A ring has one producer and one or more consumers, each with its own read
cursor (one consumer: the receive-worker rings; several: the sequenced log
read by every fan-out worker).  Cursors are monotonically growing byte
positions stored as aligned 8-byte words, each on its own cache line; a
record is ``LENGTH (4) | 4 spare | payload``, padded to 8 bytes, and never
wraps around the end of the buffer (a marker sends readers back to the start).

The producer writes a record's bytes and only then stores the write cursor;
a consumer loads the write cursor and only then reads the bytes.  Without
memory fences that order holds on x86-64 (stores are not reordered with other
stores, loads not with other loads) and nowhere weaker: these rings are sound
on x86-64 only.  A full ring refuses the record (the caller drops and counts
it); it never blocks the producer.
"""
from __future__ import annotations

import os
import select
import struct

CACHE_LINE = 64
_RECORD_HEADER = 8
_WRAP = 0xFFFFFFFF
_LENGTH = struct.Struct("<I")


def _padded(length: int) -> int:
    return (_RECORD_HEADER + length + 7) & ~7



class Ring:
    """A ring over ``buffer`` (shared memory laid out by :meth:`region_size`).

    Every process maps the same bytes and builds its own ``Ring`` over them;
    the producer process only calls the producer methods, consumer ``i`` only
    ``read(i)`` / ``release(i, ...)``.  A restarted process continues from the
    cursors in shared memory.
    """

    def __init__(self, buffer: memoryview, consumers: int = 1) -> None:
        header = CACHE_LINE * (1 + consumers)
        view = memoryview(buffer).cast("B")
        if len(view) < header + 2 * CACHE_LINE:
            raise ValueError("ring buffer too small")
        self.consumers = consumers
        self._words = view[:header].cast("Q")  # [0] write cursor, [8 * (1 + i)] read cursor of consumer i
        self.data = view[header:]  # records live here; read() returns (offset, length) pairs into it
        self.capacity = len(self.data) & ~7
        self._write = self._words[0]  # producer's position, published by publish()
        self._oldest = self._min_read()

    @staticmethod
    def region_size(capacity: int, consumers: int = 1) -> int:
        """Bytes of shared memory for a ring holding ``capacity`` bytes of records."""
        return CACHE_LINE * (1 + consumers) + ((capacity + 7) & ~7)

    # ------------------------------------------------------------ producer

    def _min_read(self) -> int:
        words = self._words
        return min(words[8 * (1 + i)] for i in range(self.consumers))

    def reserve(self, length: int) -> memoryview | None:
        """Room for a record of ``length`` bytes, or None when the ring is full.

        The record becomes visible to consumers at the next :meth:`publish`;
        reserving again before that appends after it.
        """
        need = _padded(length)
        capacity = self.capacity
        if need > capacity // 2:
            raise ValueError(f"record of {length} bytes exceeds half the ring ({capacity} bytes)")
        pos = self._write
        offset = pos % capacity
        skip = capacity - offset if capacity - offset < need else 0
        end = pos + skip + need
        if end - self._oldest > capacity:
            self._oldest = self._min_read()
            if end - self._oldest > capacity:
                return None
        data = self.data
        if skip:
            _LENGTH.pack_into(data, offset, _WRAP)
            offset = 0
        _LENGTH.pack_into(data, offset, length)
        self._write = end
        start = offset + _RECORD_HEADER
        return data[start:start + length]

    def publish(self) -> None:
        """Make every reserved record visible (one aligned 8-byte store)."""
        self._words[0] = self._write

    def discard(self) -> None:
        """Forget records reserved since the last publish."""
        self._write = self._words[0]

    # ------------------------------------------------------------ consumers

    def read(self, consumer: int = 0, limit: int = 1 << 30) -> tuple[list[tuple[int, int, int]], int]:
        """Up to ``limit`` published records not yet released by ``consumer``, and the position after them.

        Records are ``(offset, length, position after it)`` with ``offset`` into
        :attr:`data`; their bytes stay put until :meth:`release` passes them.
        """
        words = self._words
        pos = words[8 * (1 + consumer)]
        end = words[0]
        data = self.data
        capacity = self.capacity
        records: list[tuple[int, int, int]] = []
        unpack = _LENGTH.unpack_from
        while pos < end and len(records) < limit:
            offset = pos % capacity
            (length,) = unpack(data, offset)
            if length == _WRAP:
                pos += capacity - offset
                continue
            pos += _padded(length)
            records.append((offset + _RECORD_HEADER, length, pos))
        return records, pos

    def release(self, consumer: int, position: int) -> None:
        """Give back everything before ``position`` (as returned by :meth:`read`) to the producer."""
        self._words[8 * (1 + consumer)] = position

    def backlog(self, consumer: int = 0) -> int:
        """Bytes published and not yet released by ``consumer``."""
        return self._words[0] - self._words[8 * (1 + consumer)]

    def fill(self) -> float:
        """Fraction of the ring in use, as the producer sees it (0.0 to 1.0)."""
        return (self._words[0] - self._min_read()) / self.capacity


class Doorbell:
    """An eventfd an idle reader sleeps on and a writer rings after publishing.

    The reader clears it, checks its ring once more, and only then sleeps, so a
    ring between the check and the sleep is never lost (eventfd reads and writes
    are ordered by the kernel, and each is a full barrier).
    """

    def __init__(self) -> None:
        self.fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)

    def fileno(self) -> int:
        return self.fd

    def ring(self) -> None:
        try:
            os.eventfd_write(self.fd, 1)
        except BlockingIOError:  # the counter is saturated: the reader has plenty to wake it
            pass

    def clear(self) -> None:
        try:
            os.eventfd_read(self.fd)
        except BlockingIOError:
            pass

    def wait(self, timeout: float) -> bool:
        """Sleep until rung or ``timeout`` seconds pass; True when rung."""
        ready, _, _ = select.select((self.fd,), (), (), timeout)
        return bool(ready)

    def close(self) -> None:
        os.close(self.fd)
