"""A publishing Locust process's one session with the backbone: packed, tagged PUSHes and their CONFIRMs.

Pure: datagrams and time in, datagrams and finished batches out.  Every
publishing user of the process shares it (and the driver's one socket), so a
process carries hundreds of thousands of messages per second where a
:class:`fyrehose.Client` per user, with its threads, carried thousands.  It
keeps the publisher's guarantees as the Client does: every message has its
own tag, unconfirmed ones are sent again with the same tags (backing off from
``retry`` to 1 s) until ``timeout``, and only the backbone's CONFIRMs count
(the connection's admission rules, docs/protocol.md).
"""
from __future__ import annotations

import itertools
import random
from dataclasses import dataclass

from fyrehose import codec
from fyrehose.addresses import Address
from fyrehose.connection import BackboneConnection

FLAGS = codec.FLAG_NOSUBSCRIBE | codec.FLAG_NOJOURNAL | codec.FLAG_BATCH  # CONFIRMs come packed
KEEPALIVE_INTERVAL = 0.5
MAX_RETRY = 1.0


@dataclass
class _Batch:
    frames: dict[int, bytes]  # tag -> PUSH frame, until confirmed
    deadline: float
    next_retry: float
    retry: float


@dataclass(frozen=True)
class Finished:
    batch: int
    confirmed: bool  # False: some message had no CONFIRM by the timeout (it may or may not be published)


class PushSession:
    def __init__(self, backbone: Address, *, retry: float = 0.2, timeout: float = 2.0) -> None:
        self.retry = retry
        self.timeout = timeout
        self.connection = BackboneConnection(backbone, flags=FLAGS, keepalive_interval=KEEPALIVE_INTERVAL)
        self.stats = self.connection.stats
        self._tags = itertools.count(random.getrandbits(40) + 1)
        self._numbers = itertools.count(1)
        self._batches: dict[int, _Batch] = {}
        self._owner: dict[int, int] = {}  # tag -> the batch it belongs to

    @property
    def acked(self) -> bool:
        return self.connection.last_ack is not None

    @property
    def pending(self) -> int:
        return len(self._batches)

    def publish(self, payloads: list[bytes], now: float) -> tuple[int, list[bytes]]:
        """A new batch: its number, and the datagrams that carry it (packed as full as they go)."""
        tags = [tag & codec.MAX_TAG or 1 for tag in itertools.islice(self._tags, len(payloads))]
        frames = dict(zip(tags, codec.encode_pushes(payloads, tags), strict=True))
        number = next(self._numbers)
        self._batches[number] = _Batch(frames, now + self.timeout, now + self.retry, self.retry)
        self._owner.update(dict.fromkeys(frames, number))
        return number, codec.pack_greedy(list(frames.values()))

    def receive(self, datagram: bytes, source: Address, now: float) -> list[Finished]:
        """One datagram: the batches whose last CONFIRM it carried."""
        finished = []
        for tag, _seq in self.connection.receive(datagram, source, now).confirms:
            number = self._owner.pop(tag, None)
            if number is None:
                continue  # a CONFIRM repeated for a retry, or for a batch given up
            batch = self._batches[number]
            del batch.frames[tag]
            if not batch.frames:
                del self._batches[number]
                finished.append(Finished(number, True))
        return finished

    def poll(self, now: float) -> tuple[list[bytes], list[Finished]]:
        """Timers: KEEPALIVEs and the datagrams sent again; the batches given up."""
        sends, _ = self.connection.poll(now)
        finished = []
        for number, batch in list(self._batches.items()):
            if now >= batch.deadline:
                for tag in batch.frames:
                    del self._owner[tag]
                del self._batches[number]
                finished.append(Finished(number, False))
            elif now >= batch.next_retry:
                sends += codec.pack_greedy(list(batch.frames.values()))
                self.stats["push retries"] += len(batch.frames)
                batch.retry = min(batch.retry * 2, MAX_RETRY)
                batch.next_retry = now + batch.retry
        return sends, finished

    def next_deadline(self) -> float:
        deadline = self.connection.next_deadline()
        for batch in self._batches.values():
            deadline = min(deadline, batch.next_retry, batch.deadline)
        return deadline
