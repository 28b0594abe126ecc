"""Recently confirmed PUSH tags, so that a retried PUSH is confirmed again instead of published twice.

A publisher whose CONFIRM was lost resends the PUSH with the same tag.  While
(source, tag) is remembered here the backbone answers with the sequence it
already issued.  Publishers tag a batch with consecutive tags and the
backbone numbers a datagram's frames consecutively, so what is remembered is
*runs*: tags ``first .. first + count - 1`` got sequences ``seq ..``; a
datagram of 500 confirmed messages costs one entry, not 500.  Memory is
bounded by the number of runs and by age; a datagram's runs go together,
oldest first.
"""
from __future__ import annotations

from array import array
from bisect import bisect_right
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from fyrehose.protocol.codec import Address, Run


@dataclass(slots=True, eq=False)
class _Span:
    """Tags ``first`` up to ``end`` (exclusive) got sequences from ``seq`` on; ``group``: its datagram's spans."""

    first: int
    end: int
    seq: int
    group: list[_Span]


class _SourceSpans:
    """One publisher's remembered spans: disjoint, found by bisecting their sorted first tags."""

    __slots__ = ("firsts", "spans")

    def __init__(self) -> None:
        self.firsts: list[int] = []
        self.spans: dict[int, _Span] = {}

    def find(self, tag: int) -> _Span | None:
        index = bisect_right(self.firsts, tag) - 1
        if index < 0:
            return None
        span = self.spans[self.firsts[index]]
        return span if tag < span.end else None

    def overlaps(self, low: int, high: int) -> bool:
        """Whether any span holds a tag in ``low .. high``."""
        index = bisect_right(self.firsts, high) - 1
        return index >= 0 and self.spans[self.firsts[index]].end > low

    def add(self, span: _Span) -> None:
        firsts = self.firsts
        if firsts and span.first <= firsts[-1]:
            firsts.insert(bisect_right(firsts, span.first), span.first)
        else:  # the usual case: a publisher's tags grow
            firsts.append(span.first)
        self.spans[span.first] = span

    def remove(self, span: _Span) -> None:
        if self.spans.get(span.first) is not span:
            return
        del self.spans[span.first]
        del self.firsts[bisect_right(self.firsts, span.first) - 1]

    def clear_range(self, low: int, end: int) -> list[_Span]:
        """Forget tags ``low`` up to ``end`` (the latest remembering wins); the pieces split off to the right."""
        pieces = []
        while self.overlaps(low, end - 1):
            span = self.spans[self.firsts[bisect_right(self.firsts, end - 1) - 1]]
            self.remove(span)
            if span.end > end:
                right = _Span(end, span.end, span.seq + end - span.first, span.group)
                span.group.append(right)
                self.add(right)
                pieces.append(right)
            if span.first < low:
                span.end = low
                self.add(span)
        return pieces


class ConfirmMemory(Protocol):
    """What the core asks of a memory of confirmed tags: this one, or the multi-process backbone's shared table."""

    def lookup(self, source: Address, tag: int) -> int | None: ...

    def known(self, source: Address, tags: Sequence[int]) -> bool: ...

    def remember_runs(self, source: Address, runs: list[Run], now: float) -> None: ...


class ConfirmCache:
    def __init__(self, capacity: int = 1 << 17, max_age: float = 30.0) -> None:
        self.capacity = capacity  # in runs
        self.max_age = max_age
        self._by_source: dict[Address, _SourceSpans] = {}
        self._groups: deque[tuple[float, Address, list[_Span]]] = deque()  # a datagram's spans each, oldest first
        self._count = 0  # spans held

    def __len__(self) -> int:
        """Tags remembered."""
        return sum(span.end - span.first for spans in self._by_source.values() for span in spans.spans.values())

    def lookup(self, source: Address, tag: int) -> int | None:
        spans = self._by_source.get(source)
        span = spans.find(tag) if spans else None
        return span.seq + tag - span.first if span else None

    def known(self, source: Address, tags: Sequence[int] | array) -> bool:
        """Whether any of ``tags`` from ``source`` is remembered: a bisection for a batch or fresh tags."""
        spans = self._by_source.get(source)
        if not spans or not tags:
            return False
        if isinstance(tags, range):  # a batch: consecutive tags
            return spans.overlaps(tags[0], tags[-1])
        if not spans.overlaps(min(tags), max(tags)):
            return False
        return any(spans.find(tag) for tag in tags)

    def forget_runs(self, source: Address, runs: list[Run]) -> None:
        """Forget tags whose numbers will never be DELIVERed (a pair member stood down and dropped the output
        that carried them): a retry is sequenced anew rather than CONFIRMed with a number nobody has."""
        spans = self._by_source.get(source)
        if spans is None:
            return
        for first, count, _ in runs:
            self._count += len(spans.clear_range(first, first + count))

    def remember_runs(self, source: Address, runs: list[Run], now: float) -> None:
        """Remember one datagram's runs from ``source``; the oldest and the expired datagrams go."""
        if not runs:
            return
        spans = self._by_source.get(source)
        if spans is None:
            spans = self._by_source[source] = _SourceSpans()
        group: list[_Span] = []
        for first, count, seq in runs:
            end = first + count
            if spans.overlaps(first, end - 1):  # remembered again: only a retry after its datagram went
                self._count += len(spans.clear_range(first, end))
            span = _Span(first, end, seq, group)
            group.append(span)
            spans.add(span)
        self._count += len(group)
        self._groups.append((now, source, group))
        horizon = now - self.max_age
        groups = self._groups
        while groups and (self._count > self.capacity or groups[0][0] <= horizon):
            _, old_source, old = groups.popleft()
            self._count -= len(old)
            remembered = self._by_source.get(old_source)
            if remembered is None:
                continue
            for span in old:
                remembered.remove(span)
            if not remembered.spans:
                del self._by_source[old_source]
