"""Gap recovery end to end: injected loss on the way to a subscriber, recovered from another client's journal."""
from __future__ import annotations

import time

from fyrehose import Client
from fyrehose.protocol.tracker import Message

from support import LossyRelay

MESSAGES = 10_000


def test_every_message_recovered_despite_dropping_every_seventh_datagram(backbone):
    relay = LossyRelay(backbone.addr, drop_every=7)
    try:
        with Client(backbone.addr) as keeper, Client(relay.addr) as lossy, \
                Client(backbone.addr, subscribe=False) as pub:
            keeper.subscribe()
            stream = lossy.subscribe(on_loss="yield")
            payloads = [b"payload %05d" % i for i in range(MESSAGES)]
            seqs = []
            for start in range(0, MESSAGES, 500):  # many datagrams, so many of them are dropped
                seqs += pub.publish_many(payloads[start:start + 500])
            events = []
            deadline = time.monotonic() + 60
            while len(events) < MESSAGES and time.monotonic() < deadline:
                event = stream.get(timeout=1.0)
                if event is not None:
                    events.append(event)
            assert relay.dropped > 0
            assert all(isinstance(e, Message) for e in events), [e for e in events if not isinstance(e, Message)][:3]
            assert [e.seq for e in events] == seqs
            assert [e.data for e in events] == payloads
            assert lossy.stats["requests"] > 0
            assert keeper.stats["forwarded"] > 0
    finally:
        relay.close()
