"""A publisher's confirmed PUSHes as a pure machine: tags, packing, CONFIRM matching, retries and give-up.

Datagrams, CONFIRMs and time in; datagrams to send and finished batches out.
:class:`fyrehose.connection.BackboneConnection` owns one, so every driver (the
blocking :class:`fyrehose.Client`, the load test's one session per Locust
process) keeps the publisher's guarantee the same way: every message carries
its own tag, a message without a CONFIRM is sent again with the same tag
(so the backbone answers a retry with the number it already issued instead
of sequencing it twice), backing off from ``retry`` to ``max_retry``, until
the batch's deadline.

A batch takes a contiguous range of tags, so a CONFIRM finds its message by
one subtraction, and the CONFIRMs of one datagram, which come in runs of one
batch, find their batch without a look-up per message.
"""
from __future__ import annotations

import itertools
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from fyrehose import codec


@dataclass(slots=True)
class _Batch:
    number: int
    first: int  # the tag of its first message; message i has tag first + i
    frames: list[bytes]  # PUSH frames, kept to send again
    seqs: list[int]  # 0 until the message's CONFIRM arrived
    left: int  # messages still unconfirmed; -1 once given up
    deadline: float
    next_retry: float
    retry: float


@dataclass(frozen=True, slots=True)
class Finished:
    """A batch that needs no more work: every sequence number, in publish order, or None when it timed out."""

    batch: int
    seqs: list[int] | None
    unconfirmed: int = 0  # messages without a CONFIRM at the deadline (they may or may not be published)

    @property
    def confirmed(self) -> bool:
        return self.seqs is not None


class PendingPublishes:
    def __init__(self, *, retry: float = 0.2, max_retry: float = 1.0, stats: Counter[str] | None = None,
                 first_tag: int | None = None) -> None:
        self.retry = retry
        self.max_retry = max_retry
        self.stats: Counter[str] = stats if stats is not None else Counter()
        self._next_tag = first_tag if first_tag is not None else random.getrandbits(40) + 1
        self._numbers = itertools.count(1)
        self._batches: dict[int, _Batch] = {}
        self._last: _Batch | None = None  # the batch the previous CONFIRM belonged to

    def __len__(self) -> int:
        """Batches still waiting for CONFIRMs."""
        return len(self._batches)

    def start(self, payloads: Sequence[bytes], now: float, timeout: float) -> tuple[int, list[bytes]]:
        """A new batch: its number, and the datagrams that carry it, packed as full as they go."""
        count = len(payloads)
        first = self._next_tag
        if first + count > codec.MAX_TAG:  # a batch's tags never wrap around
            first = 1
        self._next_tag = first + count
        frames = codec.encode_pushes(payloads, range(first, first + count))
        number = next(self._numbers)
        self._batches[number] = _Batch(number, first, frames, [0] * count, count, now + timeout,
                                       now + self.retry, self.retry)
        datagrams = codec.pack_greedy(frames)
        self.stats["push datagrams"] += len(datagrams)
        return number, datagrams

    def confirm(self, pairs: list[tuple[int, int]]) -> list[Finished]:
        """(tag, sequence) pairs from the backbone's CONFIRMs: the batches they completed."""
        finished = []
        batch = self._last
        for tag, seq in pairs:
            if batch is None or not 0 <= tag - batch.first < len(batch.seqs):
                batch = self._owner(tag)
                if batch is None:
                    self.stats["unmatched confirms"] += 1  # a retry's repeated CONFIRM, or a batch given up
                    continue
            index = tag - batch.first
            if batch.left < 0:
                self.stats["unmatched confirms"] += 1
                continue
            if batch.seqs[index]:
                self.stats["repeated confirms"] += 1  # the answer to a retry whose first CONFIRM did arrive
                continue
            batch.seqs[index] = seq
            batch.left -= 1
            if not batch.left:
                del self._batches[batch.number]
                finished.append(Finished(batch.number, batch.seqs))
        self._last = batch
        return finished

    def _owner(self, tag: int) -> _Batch | None:
        for batch in self._batches.values():
            if 0 <= tag - batch.first < len(batch.seqs):
                return batch
        return None

    def poll(self, now: float) -> tuple[list[bytes], list[Finished]]:
        """Timers: the unconfirmed messages to send again, and the batches whose deadline passed."""
        sends: list[bytes] = []
        finished = []
        for batch in list(self._batches.values()):
            if now >= batch.deadline:
                del self._batches[batch.number]
                finished.append(Finished(batch.number, None, batch.left))
                batch.left = -1
            elif now >= batch.next_retry:
                frames = [frame for frame, seq in zip(batch.frames, batch.seqs, strict=True) if not seq]
                sends += codec.pack_greedy(frames)
                self.stats["push retries"] += len(frames)
                batch.retry = min(batch.retry * 2, self.max_retry)
                batch.next_retry = now + batch.retry
        return sends, finished

    def cancel(self, number: int) -> None:
        """Forget a batch nobody waits for any more (its publisher gave up or the client closed)."""
        batch = self._batches.pop(number, None)
        if batch is not None:
            batch.left = -1

    def next_deadline(self) -> float:
        deadline = float("inf")
        for batch in self._batches.values():
            deadline = min(deadline, batch.next_retry, batch.deadline)
        return deadline
