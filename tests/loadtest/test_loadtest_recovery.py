"""The measuring subscriber session against a real backbone and a real journaling peer.

The test drives the session's socket itself (as the Locust user does) and drops some of the
backbone's DELIVERs on the way in: the session must REQUEST them, receive them from the peer
(which the backbone FORWARDs the REQUESTs to), and count them as recovered, not as delivered
directly and not as lost.
"""
from __future__ import annotations

import socket
import time

from fyrehose import Client, Message
from fyrehose.loadtest.account import DeliveryAccount
from fyrehose.loadtest.measuring_subscriber import MeasuringSubscriber, StampedRun
from fyrehose.loadtest.stamp import stamp

MESSAGES = 300
DROP_EVERY = 4  # of the backbone's DELIVER datagrams, after the first


def released_seqs(events) -> list[int]:
    """The sequences released in order, whether message by message or as a whole datagram's run."""
    seqs = []
    for event in events:
        if isinstance(event, Message):
            seqs.append(event.seq)
        elif isinstance(event, StampedRun):
            seqs.extend(seq for _, count, lowest in event.stretches for seq in range(lowest, lowest + count))
    return seqs


def test_dropped_deliveries_are_recovered_from_a_peer_and_counted_as_such(backbone):
    account = DeliveryAccount(lambda published_ns: 0)  # one phase
    session = MeasuringSubscriber(backbone.addr, account, give_up_after=5.0)
    released = []
    dropped = 0
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock, \
            Client(backbone.address) as peer, Client(backbone.address, subscribe=False) as publisher:
        peer.subscribe()  # the peer journals what it receives, so it can answer FORWARDs
        sock.bind(("127.0.0.1", 0))

        def pump(seconds: float, until) -> None:
            nonlocal dropped
            deliveries = 0
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline and not until():
                now = time.monotonic()
                sends, events = session.handle_timers(now)
                released.extend(released_seqs(events))
                for datagram in sends:
                    sock.sendto(datagram, backbone.addr)
                sock.settimeout(max(min(session.next_deadline(), deadline) - now, 0.001))
                try:
                    datagram, source = sock.recvfrom(65536)
                except TimeoutError:
                    continue
                if source == backbone.addr and datagram[0] == 0x01:
                    deliveries += 1
                    if deliveries > 1 and deliveries % DROP_EVERY == 0:
                        dropped += 1
                        continue
                events, forward = session.receive(datagram, source, time.monotonic())
                released.extend(released_seqs(events))
                assert forward is None  # the publisher does not journal and the peer holds everything

        pump(5.0, lambda: session.acked)
        assert session.acked
        for _ in range(MESSAGES):
            publisher.publish(stamp(time.time_ns(), 16))
        pump(10.0, lambda: len(released) >= MESSAGES)

    tally = session.snapshot()[0]
    assert len(released) == MESSAGES
    assert released == list(range(released[0], released[0] + MESSAGES))
    assert dropped > 0 and session.stats["requests"] > 0
    assert tally.recovered >= dropped  # a dropped datagram may have held several frames
    assert tally.direct + tally.recovered == MESSAGES
    assert (tally.lost, tally.pending) == (0, 0)
    assert len(session.recovered) == tally.recovered
