"""Recently confirmed PUSH tags, so that a retried PUSH is confirmed again instead of published twice.

A publisher whose CONFIRM was lost resends the PUSH with the same tag.  While
(source, tag) is remembered here the backbone answers with the sequence it
already issued.  Memory is bounded by entry count and age.
"""
from __future__ import annotations

from collections import OrderedDict

from fyrehose.addresses import Address


class ConfirmCache:
    def __init__(self, capacity: int = 1 << 17, max_age: float = 30.0) -> None:
        self.capacity = capacity
        self.max_age = max_age
        self._entries: OrderedDict[tuple[Address, int], tuple[int, float]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def lookup(self, source: Address, tag: int) -> int | None:
        hit = self._entries.get((source, tag))
        return hit[0] if hit else None

    def remember(self, source: Address, tag: int, seq: int, now: float) -> None:
        entries = self._entries
        entries[(source, tag)] = (seq, now)
        horizon = now - self.max_age
        while entries:
            _, (_, stamp) = next(iter(entries.items()))
            if len(entries) <= self.capacity and stamp > horizon:
                break
            entries.popitem(last=False)
