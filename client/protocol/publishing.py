"""A publisher's confirmed PUSHes as a pure machine: tags, packing, CONFIRM matching, retries and give-up.

Datagrams, CONFIRMs and time in; datagrams to send and finished batches out.
:class:`fyrehose.protocol.connection.BackboneConnection` owns one, so every driver (the
blocking :class:`fyrehose.Client`, the load test's one session per Locust
process) keeps the publisher's guarantee the same way: every message carries
its own tag, a message without a CONFIRM is sent again with the same tag
(so the backbone answers a retry with the number it already issued instead
of sequencing it twice), backing off from ``retry`` to ``max_retry``, until
the batch's deadline.

A batch takes a contiguous range of tags, so a CONFIRM finds its message by
one subtraction, and the CONFIRMs of one datagram, which come in runs of one
batch, find their batch without a look-up per message; a run of consecutive
tags is taken with one slice assignment.  A batch of more messages than
a frame has bytes, all of one size, is built as one block, column by column
(strided slices), instead of a frame at a time.
"""
from __future__ import annotations

import itertools
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from fyrehose.protocol import codec

MAX_PUBLISH_TIMEOUT = 25.0  # below the backbone's 30 s memory of confirmed tags: a retry is still known
CONFIRM_RETRY = 0.2  # seconds before an unconfirmed message is first sent again, by default


@dataclass(slots=True)
class _Batch:
    number: int
    first: int  # the tag of its first message; message i has tag first + i
    frames: list[bytes] | bytes  # PUSH frames, kept to send again; or all of them back to back, of one size
    seqs: list[int] | range  # 0 until the message's CONFIRM arrived; a range once one run confirmed them all
    left: int  # messages still unconfirmed; -1 once given up
    deadline: float
    next_retry: float
    retry: float


@dataclass(frozen=True, slots=True, eq=False)
class Finished:
    """A batch that needs no more work: every sequence number, in publish order, or None when it timed out."""

    batch: int
    seqs: list[int] | range | None  # a range when one run of CONFIRMs brought them all (the usual case)
    unconfirmed: int = 0  # messages without a CONFIRM at the deadline (they may or may not be published)

    @property
    def confirmed(self) -> bool:
        return self.seqs is not None

    def __eq__(self, other: object) -> bool:
        """The same batch with the same numbers, whether they are held as a list or as a range."""
        if not isinstance(other, Finished):
            return NotImplemented
        if (self.batch, self.unconfirmed) != (other.batch, other.unconfirmed):
            return False
        if self.seqs is None or other.seqs is None:
            return self.seqs is other.seqs
        return list(self.seqs) == list(other.seqs)


class PendingPublishes:
    def __init__(self, *, retry: float = CONFIRM_RETRY, max_retry: float = 1.0, stats: Counter[str] | None = None,
                 first_tag: int | None = None) -> None:
        self.retry = retry
        self.max_retry = max_retry
        self.stats: Counter[str] = stats if stats is not None else Counter()
        self._next_tag = first_tag if first_tag is not None else random.getrandbits(40) + 1
        self._numbers = itertools.count(1)
        self._batches: dict[int, _Batch] = {}
        self._last: _Batch | None = None  # the batch the previous CONFIRM belonged to
        self._due = float("inf")  # no timer of any batch fires before this (it may be earlier than needed)

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
        frames: list[bytes] | bytes
        datagrams: list[bytes]
        repeated = count > 1 and payloads.count(payloads[0]) == count  # one payload many times: a frame, repeated
        if repeated or len(payloads[0]) + codec.FRAME_HEADER <= count and len(set(map(len, payloads))) == 1:
            frames = _repeated_block(payloads[0], count, first) if repeated else _uniform_block(payloads, first)
            step = len(frames) // count
            per = max(1, codec.MAX_DATAGRAM // step) * step
            datagrams = [frames[start:start + per] for start in range(0, len(frames), per)]
        else:
            frames = codec.encode_pushes(payloads, range(first, first + count))
            datagrams = codec.pack_greedy(frames)
        number = next(self._numbers)
        self._batches[number] = _Batch(number, first, frames, [0] * count, count, now + timeout,
                                       now + self.retry, self.retry)
        self._due = min(self._due, now + min(self.retry, timeout))
        self.stats["push datagrams"] += len(datagrams)
        return number, datagrams

    def confirm_runs(self, runs: list[codec.Run]) -> list[Finished]:
        """One CONFIRM datagram as runs (:func:`fyrehose.protocol.codec.decode_confirm_runs`): the batches it completed.

        A run of one batch's tags that answers no retry (the usual CONFIRM
        datagram) is taken in one slice assignment.
        """
        finished: list[Finished] = []
        pending = list(reversed(runs))
        while pending:
            first, count, seq = pending.pop()
            batch = self._last
            if batch is None or not 0 <= first - batch.first < len(batch.seqs):
                batch = self._owner(first)
            start = first - batch.first if batch is not None else 0
            if batch is not None and start + count > len(batch.seqs):  # runs on into the next batch's tags
                taken = len(batch.seqs) - start
                pending.append((first + taken, count - taken, seq + taken))
                count = taken
            if batch is None or batch.left <= 0 or (batch.left < len(batch.seqs) and any(batch.seqs[start:start + count])):
                finished += self.confirm([(first + i, seq + i) for i in range(count)])  # retries: one by one
                continue
            if count == len(batch.seqs):  # the whole batch in one run: its numbers without an int each
                batch.seqs = range(seq, seq + count)
            else:
                seqs = batch.seqs
                assert isinstance(seqs, list)  # a range only once a run confirmed the whole batch (left 0)
                seqs[start:start + count] = range(seq, seq + count)
            batch.left -= count
            self._last = batch
            if not batch.left:
                del self._batches[batch.number]
                finished.append(Finished(batch.number, batch.seqs))
        return finished

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
            seqs = batch.seqs
            assert isinstance(seqs, list)  # a range is confirmed throughout: no slot of it is 0
            seqs[index] = seq
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

    def handle_timers(self, now: float) -> tuple[list[bytes], list[Finished]]:
        """Timers: the unconfirmed messages to send again, and the batches whose deadline passed.

        Cheap when nothing is due (drivers call it for every datagram they receive).
        """
        sends: list[bytes] = []
        finished: list[Finished] = []
        if now < self._due:
            return sends, finished
        for batch in list(self._batches.values()):
            if now >= batch.deadline:
                del self._batches[batch.number]
                finished.append(Finished(batch.number, None, batch.left))
                batch.left = -1
            elif now >= batch.next_retry:
                frames = [frame for frame, seq in zip(_frames(batch.frames, len(batch.seqs)), batch.seqs, strict=True)
                          if not seq]
                sends += codec.pack_greedy(frames)
                self.stats["push retries"] += len(frames)
                batch.retry = min(batch.retry * 2, self.max_retry)
                batch.next_retry = now + batch.retry
        self._due = self.next_deadline()
        return sends, finished

    def retry_now(self, now: float) -> None:
        """The backbone answers again after a silence (a takeover, a network outage): what is unconfirmed goes
        again at the next :meth:`handle_timers`, and backs off afresh, instead of waiting out a back-off grown while nobody
        answered."""
        for batch in self._batches.values():
            batch.retry = self.retry
            batch.next_retry = now
        if self._batches:
            self._due = now

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


def _uniform_block(payloads: Sequence[bytes], first_tag: int) -> bytes:
    """PUSH frames of equal-size ``payloads`` tagged ``first_tag``, ``first_tag + 1``, ...: built column by column.

    Each header byte, each tag byte and each payload byte position is one
    strided copy over all frames: cheaper than a frame at a time once the
    batch has more frames than a frame has bytes (timeit: about 0.25 us per
    strided copy, 0.3 us per frame built on its own).
    """
    count = len(payloads)
    size = len(payloads[0])
    step = codec.FRAME_HEADER + size
    block = bytearray(step * count)
    for offset, value in enumerate((codec.PUSH, size >> 8, size & 0xFF)):
        block[offset::step] = bytes((value,)) * count
    codec.put_consecutive_u48(block, 3, step, first_tag, count)
    data = b"".join(payloads)
    for k in range(size):
        block[codec.FRAME_HEADER + k::step] = data[k::size]
    return bytes(block)


def _repeated_block(payload: bytes, count: int, first_tag: int) -> bytes:
    """``count`` PUSH frames of one ``payload`` tagged ``first_tag``, ``first_tag + 1``, ...: the frame repeated,
    then its tag column written whole."""
    block = bytearray(codec.encode_push(payload, first_tag) * count)
    codec.put_consecutive_u48(block, 3, codec.FRAME_HEADER + len(payload), first_tag, count)
    return bytes(block)


def _frames(frames: list[bytes] | bytes, count: int) -> list[bytes]:
    if isinstance(frames, list):
        return frames
    step = len(frames) // count
    return [frames[start:start + step] for start in range(0, len(frames), step)]
