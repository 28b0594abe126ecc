"""Sequence numbers that are never reused: a counter that reserves blocks ahead of use.

The counter is pure.  Whoever drives it must persist ``reserved`` durably
before any number up to it leaves the process; after a crash the next run
starts above the last persisted reservation, so nothing issued is ever issued
again (numbers reserved but never issued are skipped).

Once half a block is issued the next block is reserved, while the numbers
issued are still covered by the reservation before: a driver persists it in
the background (fyrehose.backbone.host.statefile.ReservationWriter) and the loop
that sends never waits for the disk, except for the very first reservation
or when half a block goes out faster than one write.
"""
from __future__ import annotations

from fyrehose.protocol.codec import MAX_SEQUENCE

DEFAULT_BLOCK = 1 << 16


class SequenceExhausted(RuntimeError):
    """All 2**48 - 1 sequence numbers have been issued."""


class SequenceCounter:
    def __init__(self, reserved: int = 0, block: int = DEFAULT_BLOCK) -> None:
        if reserved < 0 or reserved > MAX_SEQUENCE:
            raise ValueError(f"persisted high-water mark {reserved} is out of range")
        if block < 1:
            raise ValueError("reservation block must be at least 1")
        self.next = reserved + 1
        self.reserved = reserved
        self.block = block
        self.unpersisted = False  # True when `reserved` grew and was not written yet

    @property
    def last_issued(self) -> int:
        return self.next - 1

    def take(self, count: int) -> int:
        """Issue ``count`` consecutive numbers and return the first."""
        first = self.next
        last = first + count - 1
        if last > MAX_SEQUENCE:
            raise SequenceExhausted(f"cannot issue {count} numbers after {self.last_issued}")
        if last > self.reserved:  # beyond every reservation: these numbers wait for this one
            self.reserved = min(MAX_SEQUENCE, last + self.block)
            self.unpersisted = True
        elif self.reserved - last < self.block // 2:  # half the block issued: the next one, ahead of need
            self.reserved = min(MAX_SEQUENCE, self.reserved + self.block)
            self.unpersisted = True
        self.next = last + 1
        return first
