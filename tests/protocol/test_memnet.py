"""Leases, gap recovery and give-up on the in-memory network: the pure backbone and pure clients, manual time.

Each test covers seconds of protocol time in milliseconds, leases to the exact millisecond.
Over real UDP, per backbone mode, tests/backbone/test_backbone_udp.py keeps one end-to-end test of a
lease running out and tests/drivers/test_client.py (the gevent client) one of a lease kept by renewal;
tests/drivers/test_client.py covers gap recovery and give-up end to end.
"""
from __future__ import annotations

from memnet import BACKBONE, MemoryClient, MemoryNetwork

from fyrehose.backbone.clients import CLIENT_LIFETIME
from fyrehose.protocol import codec


def deliver_seqs(datagram: bytes) -> list[int]:
    if not datagram or datagram[0] != codec.DELIVER:
        return []
    spans, _ = codec.scan(datagram, codec.DELIVER)
    return [seq for _, _, seq in spans]


def test_a_keepalive_every_half_second_keeps_a_subscription_past_the_lifetime():
    net = MemoryNetwork()
    sub = net.client(1001)
    pub = net.client(1002, subscribe=False)
    net.run(CLIENT_LIFETIME + 1.0)
    net.publish(pub, [b"late"])
    net.run(0.1)
    assert [(m.seq, m.data) for m in sub.messages] == [(1, b"late")]
    assert sub.connection.reachable(net.now, 5.0)


def test_a_silent_client_expires_after_the_lifetime_and_a_keepalive_brings_it_back():
    net = MemoryNetwork()
    sub = net.client(1001)
    pub = net.client(1002, subscribe=False)
    net.run(0.1)
    sub.silent = True
    net.run(CLIENT_LIFETIME + 0.5)
    net.publish(pub, [b"missed"])
    net.run(0.1)
    assert sub.messages == []  # no longer in the backbone's table
    sub.silent = False
    net.run(0.1)
    net.publish(pub, [b"back"])
    net.run(1.0)
    # back in the table; the HEAD of its first ACK shows sequence 1 went by, which nobody can supply
    assert [m.data for m in sub.messages] == [b"back"]


def push_at(net: MemoryNetwork, pub: MemoryClient, payload: bytes, at: float) -> None:
    """Time runs up to ``at``, where the PUSH reaches the backbone (and its DELIVERs their subscribers)."""
    if net.now < at - net.step:
        net.run_until(at - net.step)
    net.publish(pub, [payload])
    net.tick(at=at)


def test_a_subscriber_is_leased_for_five_seconds_after_its_last_keepalive_to_the_millisecond():
    net = MemoryNetwork(step=0.001)
    sub = net.client(1001)
    witness = net.client(1003)  # keeps renewing: proves every PUSH was sequenced and delivered to someone
    pub = net.client(1002, subscribe=False)
    net.tick()  # the first KEEPALIVEs
    t0 = net.now
    assert net.backbone.clients.get(sub.address).expires == t0 + CLIENT_LIFETIME
    sub.silent = True  # no KEEPALIVE after t0
    push_at(net, pub, b"at 4 s", t0 + 4.0)
    push_at(net, pub, b"at 4.999 s", t0 + 4.999)
    assert net.backbone.clients.get(sub.address) is not None
    push_at(net, pub, b"at 5 s", t0 + CLIENT_LIFETIME)
    push_at(net, pub, b"at 5.5 s", t0 + 5.5)
    assert [(m.seq, m.data) for m in sub.messages] == [(1, b"at 4 s"), (2, b"at 4.999 s")]
    assert [m.data for m in witness.messages] == [b"at 4 s", b"at 4.999 s", b"at 5 s", b"at 5.5 s"]
    assert net.backbone.clients.get(sub.address) is None  # the lease ran out at exactly t0 + 5 s


def test_one_keepalive_renews_the_lease_for_five_seconds_from_that_keepalive():
    net = MemoryNetwork(step=0.001)
    sub = net.client(1001)
    witness = net.client(1003)
    pub = net.client(1002, subscribe=False)
    net.tick()
    t0 = net.now
    sub.silent = True
    net.run_until(t0 + 4.998)
    sub.silent = False
    net.tick(at=t0 + 4.999)  # one KEEPALIVE, overdue since t0 + 0.5
    renewed = net.now
    sub.silent = True
    assert net.backbone.clients.get(sub.address).expires == renewed + CLIENT_LIFETIME
    push_at(net, pub, b"past the first lease", t0 + CLIENT_LIFETIME)
    push_at(net, pub, b"last millisecond", renewed + 4.999)
    push_at(net, pub, b"renewed lease over", renewed + CLIENT_LIFETIME)
    assert [m.data for m in sub.messages] == [b"past the first lease", b"last millisecond"]
    assert len(witness.messages) == 3


def test_the_connection_renews_every_half_second_so_its_lease_never_lapses():
    net = MemoryNetwork(step=0.001)
    sub = net.client(1001)
    pub = net.client(1002, subscribe=False)
    net.tick()
    t0 = net.now
    interval = sub.connection.keepalive_interval
    shortest = CLIENT_LIFETIME
    for lease_end in (t0 + CLIENT_LIFETIME, t0 + 2 * CLIENT_LIFETIME, t0 + 2.5 * CLIENT_LIFETIME):
        while net.now + net.step < lease_end:  # tick by tick: the lease left never drops below 5 s - interval
            net.tick()
            shortest = min(shortest, net.backbone.clients.get(sub.address).expires - net.now)
        push_at(net, pub, b"at %.3f s" % (lease_end - t0), lease_end)
    assert CLIENT_LIFETIME - interval - net.step <= shortest
    assert [m.data for m in sub.messages] == [b"at 5.000 s", b"at 10.000 s", b"at 12.500 s"]
    assert sub.lost == []


def test_every_seventh_deliver_dropped_is_recovered_from_another_clients_store():
    net = MemoryNetwork()
    keeper = net.client(1001)
    late = net.client(1003, batch=False)  # one frame per datagram, so a drop loses exactly one message
    pub = net.client(1002, subscribe=False)
    net.run(0.1)
    dropped = []

    def every_seventh(datagram, source, destination):
        seqs = deliver_seqs(datagram)
        if destination == late.address and source == BACKBONE and seqs and seqs[0] % 7 == 0:
            dropped.append(seqs[0])
            return True
        return False

    net.drop = every_seventh
    net.publish(pub, [b"m%d" % i for i in range(1000)])
    net.run(3.0)
    assert len(dropped) == 142
    assert [m.seq for m in late.messages] == list(range(1, 1001))
    assert [m.data for m in late.messages] == [b"m%d" % i for i in range(1000)]
    assert late.lost == []
    assert keeper.connection.stats["delivered frames"] == 1000
    assert late.connection.stats["requests"] >= 1


def test_duplicated_and_reordered_datagrams_still_give_one_ordered_stream():
    net = MemoryNetwork(seed=3)
    keeper = net.client(1001, from_seq=1)
    sub = net.client(1003, batch=False, from_seq=1)  # reordered: the first to arrive need not be the first
    pub = net.client(1002, subscribe=False)
    net.run(0.1)
    net.duplicate = lambda datagram, source, destination: destination == sub.address
    net.reorder = True
    arrived: list[int] = []  # the backbone's DELIVERs in the order they reached ``sub``
    receive = sub.connection.receive

    def watched(datagram, source, now):
        if source == BACKBONE:
            arrived.extend(deliver_seqs(datagram))
        return receive(datagram, source, now)

    sub.connection.receive = watched
    net.publish(pub, [b"%d" % i for i in range(300)])
    net.run(2.0)
    assert sorted(arrived) == [seq for seq in range(1, 301) for _ in range(2)]  # each one twice...
    assert arrived != sorted(arrived)  # ...and out of order
    assert [m.seq for m in sub.messages] == list(range(1, 301))
    assert [m.seq for m in keeper.messages] == list(range(1, 301))
    assert sub.connection.tracker.duplicates == 300


def test_a_hole_nobody_holds_is_given_up_after_give_up_after_and_reported():
    net = MemoryNetwork()
    a = net.client(1001, batch=False, give_up_after=2.0)
    b = net.client(1003, batch=False, give_up_after=2.0)
    pub = net.client(1002, subscribe=False)
    net.run(0.1)
    net.drop = lambda datagram, source, destination: source == BACKBONE and 5 in deliver_seqs(datagram)
    net.publish(pub, [b"%d" % i for i in range(10)])
    net.run(1.5)
    assert [m.seq for m in a.messages] == [1, 2, 3, 4]  # waiting for 5, asking for it
    net.run(1.0)
    for client in (a, b):
        assert [(lost.from_seq, lost.to_seq) for lost in client.lost] == [(5, 5)]
        assert [m.seq for m in client.messages] == [1, 2, 3, 4, 6, 7, 8, 9, 10]


def test_a_retried_push_whose_confirm_was_lost_is_confirmed_again_not_sequenced_again():
    net = MemoryNetwork()
    pub = net.client(1002, subscribe=False)
    sub = net.client(1001)
    net.run(0.1)
    net.drop = lambda datagram, source, destination: datagram[:1] == bytes((codec.CONFIRM,))
    (tag,) = net.publish(pub, [b"once"])
    net.run(0.1)
    assert pub.confirms == {}
    net.drop = lambda *_: False
    net.publish(pub, [b"once"], tags=[tag])
    net.run(0.1)
    assert pub.confirms == {tag: 1}
    assert [(m.seq, m.data) for m in sub.messages] == [(1, b"once")]
