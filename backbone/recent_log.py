"""The messages the backbone sequenced last, bounded in bytes: its own copy for last-resort re-delivery.

When the backbone's send buffer overflows, every subscriber misses the same
DELIVERs and no journaling client holds them to answer a REQUEST.  The
backbone still has them for a while: this log keeps the sequenced DELIVER
datagrams (as the log entries :meth:`Backbone.take_log` hands out, no copy),
oldest dropped first past ``max_bytes``, and returns the frames of a range.

Pure: entries in, frames out.
"""
from __future__ import annotations

import bisect
from collections import deque
from itertools import islice

from fyrehose import codec
from fyrehose.backbone.pushes import LogEntry

DEFAULT_BYTES = 64 << 20


class RecentLog:
    def __init__(self, max_bytes: int = DEFAULT_BYTES) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self._firsts: deque[int] = deque()  # first sequence of each entry, ascending
        self._entries: deque[LogEntry] = deque()

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def first(self) -> int | None:
        """The oldest sequence still held."""
        return self._firsts[0] if self._firsts else None

    def add(self, entries: list[LogEntry]) -> None:
        if not self.max_bytes:
            return
        for entry in entries:
            view = entry.view
            self._firsts.append(int.from_bytes(view[3:codec.FRAME_HEADER], "big"))
            self._entries.append(entry)
            self.bytes += len(view)
        while self.bytes > self.max_bytes and self._entries:
            self.bytes -= len(self._entries.popleft().view)
            self._firsts.popleft()

    def frames(self, from_seq: int, to_seq: int) -> list[tuple[int, memoryview]]:
        """(sequence, DELIVER frame) for every held sequence in ``from_seq..to_seq``, ascending."""
        firsts = self._firsts
        if not firsts or to_seq < firsts[0]:
            return []
        index = max(0, bisect.bisect_right(firsts, from_seq) - 1)
        out = []
        for first, entry in zip(islice(firsts, index, None), islice(self._entries, index, None), strict=True):
            if first > to_seq:
                break
            for offset, frame in enumerate(entry.frames()):
                seq = first + offset
                if seq > to_seq:
                    break
                if seq >= from_seq:
                    out.append((seq, frame))
        return out
