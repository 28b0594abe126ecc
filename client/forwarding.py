"""Answering a FORWARD from the messages a client holds: the one rule every driver that serves FORWARDs follows.

A FORWARD names a requester and a range of sequences it missed; the answer
is a DELIVER datagram for each message of the range the client holds, in
order, one frame per datagram (the FORWARD does not say whether the
requester takes BATCH), and nothing for what it does not hold.  The answers
are paced by a :class:`~fyrehose.pacing.TokenBucket` of ``FORWARD_RATE``
messages/s with bursts of ``FORWARD_BURST``, so a wide range cannot flood
the requester; the driver sleeps as the bucket says, in its own way (the
threaded :class:`fyrehose.Client`, the gateways' gevent link, the load
test's subscribers).
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Protocol

from fyrehose import codec

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
