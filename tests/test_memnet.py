"""Leases, gap recovery and give-up on the in-memory network: the pure backbone and pure clients, manual time.

Each test covers seconds of protocol time in milliseconds; tests/test_client.py keeps one
end-to-end test of each behaviour per backbone mode over real UDP.
"""
from __future__ import annotations

from memnet import BACKBONE, MemoryNetwork

from fyrehose import codec
from fyrehose.backbone.clients import CLIENT_LIFETIME


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
    net.publish(pub, [b"%d" % i for i in range(300)])
    net.run(2.0)
    assert [m.seq for m in sub.messages] == list(range(1, 301))
    assert [m.seq for m in keeper.messages] == list(range(1, 301))
    assert sub.connection.tracker.duplicates >= 300


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
