"""Recently confirmed PUSH tags, so that a retried PUSH is confirmed again instead of published twice.

A publisher whose CONFIRM was lost resends the PUSH with the same tag.  While
(source, tag) is remembered here the backbone answers with the sequence it
already issued.  Memory is bounded by entry count and age: whole datagrams'
worth of tags go at once, oldest first, so the cost per tag stays a dict
store and a dict delete.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from fyrehose.addresses import Address


class ConfirmCache:
    def __init__(self, capacity: int = 1 << 17, max_age: float = 30.0) -> None:
        self.capacity = capacity
        self.max_age = max_age
        self._by_source: dict[Address, dict[int, int]] = {}  # source -> tag -> sequence
        self._batches: deque[tuple[float, Address, list[tuple[int, int]]]] = deque()  # oldest first
        self._count = 0

    def __len__(self) -> int:
        return sum(map(len, self._by_source.values()))

    def lookup(self, source: Address, tag: int) -> int | None:
        tags = self._by_source.get(source)
        return tags.get(tag) if tags else None

    def known(self, source: Address, tags: Iterable[int]) -> bool:
        """Whether any of ``tags`` from ``source`` is remembered: one set test for a whole datagram."""
        remembered = self._by_source.get(source)
        return bool(remembered) and not remembered.keys().isdisjoint(tags)

    def remember(self, source: Address, tag: int, seq: int, now: float) -> None:
        self.remember_many(source, [(tag, seq)], now)

    def remember_many(self, source: Address, confirmed: list[tuple[int, int]], now: float) -> None:
        """Remember each (tag, sequence) of one datagram from ``source``; the oldest and the expired go."""
        if not confirmed:
            return
        tags = self._by_source.get(source)
        if tags is None:
            tags = self._by_source[source] = {}
        tags.update(confirmed)
        self._batches.append((now, source, confirmed))
        self._count += len(confirmed)
        horizon = now - self.max_age
        batches = self._batches
        while batches and (self._count > self.capacity or batches[0][0] <= horizon):
            _, old_source, old = batches.popleft()
            self._count -= len(old)
            remembered = self._by_source.get(old_source)
            if remembered is None:  # emptied by an older batch holding the same tags
                continue
            for tag, seq in old:
                if remembered.get(tag) == seq:  # not remembered again since
                    del remembered[tag]
            if not remembered:
                del self._by_source[old_source]
