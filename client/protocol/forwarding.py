"""Answering a FORWARD from the messages a client holds: the one rule every driver that serves FORWARDs follows.

A FORWARD names a requester and a range of sequences it missed; the answer
is a DELIVER datagram for each message of the range the client holds, in
order, one frame per datagram (the FORWARD does not say whether the
requester takes BATCH), and nothing for what it does not hold.  The answers
are paced by a :class:`~fyrehose.protocol.pacing.TokenBucket` of ``FORWARD_RATE``
messages/s with bursts of ``FORWARD_BURST``, so a wide range cannot flood
the requester: :class:`Paced` says when the next may go, and the driver waits
that long with its own sleep (``time.sleep`` in the threaded
:class:`fyrehose.Client`, ``gevent.sleep`` in the gateways' link and the load
test's subscribers).
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Protocol

from fyrehose.protocol import codec
from fyrehose.protocol.pacing import TokenBucket

FORWARD_RATE = 50_000  # re-DELIVERs per second, by default
FORWARD_BURST = 256  # re-DELIVERs sent at once before the rate applies


class MessageStore(Protocol):
    """Where a client keeps messages to answer FORWARDs from."""

    def add_many(self, messages: Iterable[tuple[int, bytes]]) -> None: ...

    def held(self, from_seq: int, to_seq: int) -> Iterable[tuple[int, bytes]]: ...


def deliveries(store: MessageStore, forward: codec.Forward) -> Iterator[bytes]:
    """The DELIVER datagrams that answer ``forward`` from ``store``, to send to ``(forward.addr, forward.port)``."""
    for seq, payload in store.held(forward.from_seq, forward.to_seq):
        yield codec.encode_deliver(seq, payload)


class Paced:
    """``datagrams`` handed out one at a time as ``bucket`` allows; the driver waits in between with its own sleep.

    :meth:`next_send` says when the next one may go, :meth:`take` hands it
    out.  A token is taken only for a datagram there is, so a driver that
    stops while it waited has taken no token it did not use.
    """

    __slots__ = ("_bucket", "_datagrams", "_head")

    def __init__(self, datagrams: Iterable[bytes], bucket: TokenBucket) -> None:
        self._bucket = bucket
        self._datagrams = iter(datagrams)
        self._head = next(self._datagrams, None)

    def next_send(self, now: float) -> float | None:
        """Seconds until the next datagram may go at ``now``: 0.0 when it may go now (its token is taken,
        :meth:`take` it), None when there is none left."""
        if self._head is None:
            return None
        return self._bucket.wait_time(now)

    def take(self) -> bytes:
        """The datagram :meth:`next_send` allowed."""
        head = self._head
        if head is None:
            raise ValueError("nothing left to send")
        self._head = next(self._datagrams, None)
        return head
