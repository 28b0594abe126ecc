"""Answering a FORWARD from the messages a client holds: the one rule every driver that serves FORWARDs follows.

A FORWARD names a requester and a range of sequences it missed; the answer
is a DELIVER datagram for each message of the range the client holds, in
order, one frame per datagram (the FORWARD does not say whether the
requester takes BATCH), and nothing for what it does not hold.  The answers
are paced by a :class:`~fyrehose.protocol.pacing.TokenBucket` of ``FORWARD_RATE``
messages/s with bursts of ``FORWARD_BURST``, so a wide range cannot flood
the requester: :func:`paced` waits as the bucket says, with the driver's own
sleep (``time.sleep`` in the threaded :class:`fyrehose.Client`,
``gevent.sleep`` in the gateways' link and the load test's subscribers).
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
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


def paced(datagrams: Iterable[bytes], bucket: TokenBucket, sleep: Callable[[float], object],
          clock: Callable[[], float], stopped: Callable[[], bool] = lambda: False) -> Iterator[bytes]:
    """Each of ``datagrams`` once ``bucket`` has a token for it (at ``clock()``), waiting meanwhile with the
    driver's own ``sleep``; none more once ``stopped()`` (asked before each token is taken, after every wait too, so
    every token taken is a datagram handed out, and a driver stopped while it waited sends nothing more)."""
    for datagram in datagrams:
        if stopped():
            return
        delay = bucket.wait_time(clock())
        while delay > 0:
            sleep(delay)
            if stopped():
                return
            delay = bucket.wait_time(clock())
        yield datagram
