"""The multicast extension's pure parts: the backbone core's group copy, the client's admission of group
datagrams and its fallback to unicast, driven with a manual clock and hand-built datagrams (no sockets)."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fyrehose.backbone.clients import ClientTable
from fyrehose.backbone.core import Backbone
from fyrehose.errors import InputError
from fyrehose.net.addresses import parse_group
from fyrehose.protocol import codec
from fyrehose.protocol.codec import Deliver, Forward, Keepalive, KeepaliveAck, Push, Request
from fyrehose.protocol.connection import BackboneConnection, ConnectionOptions
from fyrehose.protocol.multicast import GroupWatch, fallback_notice
from fyrehose.protocol.tracker import Lost, TrackerOptions

GROUP = ("239.255.0.1", 2324)
PUB = ("10.9.9.9", 4000)
JOINED = ("10.0.0.1", 5001)
JOINED_TOO = ("10.0.0.2", 5002)
PLAIN = ("10.0.0.3", 5003)
BATCH = ("10.0.0.4", 5004)
BACKBONE = ("10.0.0.100", 2323)
STRANGER = ("10.0.0.66", 2323)  # the backbone's port, another address
T0 = 1000.0
JOIN_FLAGS = codec.FLAG_BATCH | codec.FLAG_MULTICAST


def ka(bb: Backbone, source, now: float, flags: int, token: bytes = bytes(16)) -> None:
    bb.receive(codec.encode(Keepalive("0.0.0.0", 0, flags, token)), source, now)


def sent(out) -> list[tuple[bytes, tuple[str, int]]]:
    return [(bytes(data), addr) for data, addr in out.sends]


def seqs_to(sends, addr) -> list[int]:
    return [f.seq for data, a in sends if a == addr for f in codec.decode(data) if isinstance(f, Deliver)]


# ---------------------------------------------------------------- the group argument


@pytest.mark.parametrize("text", ["239.255.0.1:2324", "224.1.2.3:9", "239.0.0.1:65535"])
def test_a_multicast_group_and_port_parse(text):
    host, port = parse_group(text)
    assert f"{host}:{port}" == text


@pytest.mark.parametrize("text, reason", [
    ("10.0.0.1:2324", "not an IPv4 multicast group"),
    ("224.0.0.251:5353", "link-local"),
    ("239.255.0.1:0", "port other than 0"),
    ("239.255.0.1", "HOST:PORT"),
    ("239.255.0.1:x", "not a number"),
])
def test_anything_else_is_a_clear_input_error(text, reason):
    with pytest.raises(InputError, match=reason):
        parse_group(text)


# ---------------------------------------------------------------- the backbone core


def joined_backbone(**options) -> Backbone:
    bb = Backbone(multicast=GROUP, **options)
    for client, flags in ((JOINED, JOIN_FLAGS), (JOINED_TOO, codec.FLAG_MULTICAST), (PLAIN, 0),
                          (BATCH, codec.FLAG_BATCH)):
        ka(bb, client, T0, flags)
    bb.flush(T0)
    return bb


def test_each_datagram_goes_once_to_the_group_and_unicast_only_to_who_did_not_join():
    bb = joined_backbone()
    bb.receive(codec.pack([Push(b"a"), Push(b"b")]), PUB, T0)
    sends = sent(bb.flush(T0))
    group = [data for data, addr in sends if addr == GROUP]
    assert len(group) == 1 and seqs_to(sends, GROUP) == [1, 2]  # packed, as for BATCH
    assert seqs_to(sends, JOINED) == seqs_to(sends, JOINED_TOO) == []
    assert seqs_to(sends, PLAIN) == [1, 2] and len([a for _, a in sends if a == PLAIN]) == 2
    assert seqs_to(sends, BATCH) == [1, 2]
    assert bb.counters["multicast datagrams"] == 1
    assert bb.counters["delivered"] == 2 * 3  # plain, batch, and the group once
    assert bb.clients.counts(T0)["multicast subscribers"] == 2


def test_a_large_flush_is_packed_for_the_group_up_to_batch_bytes():
    bb = joined_backbone(batch_bytes=200)
    for _i in range(10):
        bb.receive(codec.encode(Push(b"x" * 50)), PUB, T0)
    sends = sent(bb.flush(T0))
    group = [data for data, addr in sends if addr == GROUP]
    assert all(len(data) <= 200 for data in group) and len(group) == 4  # 59-byte frames, 3 a datagram
    assert seqs_to(sends, GROUP) == list(range(1, 11))
    assert [data for data, addr in sends if addr == BATCH] == group  # the same datagrams


def test_control_and_repair_stay_unicast():
    bb = joined_backbone()
    bb.receive(codec.encode(Push(b"tagged", 7)), PUB, T0)  # a CONFIRM to PUB
    ka(bb, JOINED, T0, JOIN_FLAGS | codec.FLAG_HEAD, b"t" * 16)  # an ACK with HEAD
    bb.receive(codec.encode(Request("0.0.0.0", 0, 1, 1)), JOINED, T0)  # a FORWARD to a journaling client
    sends = sent(bb.flush(T0))
    assert seqs_to(sends, GROUP) == [1]
    for data, addr in sends:
        if addr == GROUP:
            assert data[0] == codec.DELIVER
        else:
            assert data[0] != codec.DELIVER or addr in (PLAIN, BATCH)
    assert any(isinstance(f, KeepaliveAck) for d, a in sends if a == JOINED for f in codec.decode(d))
    assert any(isinstance(f, Forward) and (f.addr, f.port) == JOINED
               for d, a in sends if a != GROUP and d[0] == codec.FORWARD for f in codec.decode(d))


def test_last_resort_redelivery_to_a_joined_subscriber_is_unicast():
    bb = Backbone(multicast=GROUP)
    ka(bb, JOINED, T0, JOIN_FLAGS | codec.FLAG_NOJOURNAL)  # no journaling client anywhere
    bb.receive(codec.encode(Push(b"m")), PUB, T0)
    assert seqs_to(sent(bb.flush(T0)), GROUP) == [1]
    bb.receive(codec.encode(Request("0.0.0.0", 0, 1, 1)), JOINED, T0 + 0.1)  # the group lost it
    sends = sent(bb.flush(T0 + 0.1))
    assert seqs_to(sends, JOINED) == [1] and seqs_to(sends, GROUP) == []
    assert bb.counters["redelivered"] == 1


def test_a_backbone_without_a_group_keeps_unicasting_to_a_client_that_asks_for_it():
    bb = Backbone()
    ka(bb, JOINED, T0, JOIN_FLAGS)
    bb.receive(codec.encode(Push(b"m")), PUB, T0)
    assert seqs_to(sent(bb.flush(T0)), JOINED) == [1]


def test_a_client_that_drops_the_flag_gets_unicast_again():
    bb = joined_backbone()
    ka(bb, JOINED, T0 + 1, codec.FLAG_BATCH)
    bb.receive(codec.encode(Push(b"m")), PUB, T0 + 1)
    sends = sent(bb.flush(T0 + 1))
    assert seqs_to(sends, JOINED) == [1] and seqs_to(sends, GROUP) == [1]


@given(st.lists(st.integers(0, 0x3F), min_size=1, max_size=6))
def test_unicast_goes_exactly_to_live_subscribers_without_the_flag(flag_sets):
    table = ClientTable()
    clients = [(f"10.1.0.{i + 1}", 6000 + i) for i in range(len(flag_sets))]
    for addr, flags in zip(clients, flag_sets):
        table.refresh(addr, flags, T0)
    plain, batch = table.subscribers(T0)
    expected = {addr for addr, flags in zip(clients, flag_sets)
                if not flags & (codec.FLAG_NOSUBSCRIBE | codec.FLAG_MULTICAST)}
    assert set(plain) | set(batch) == expected
    assert table.counts(T0)["multicast subscribers"] == sum(
        1 for flags in flag_sets if flags & codec.FLAG_MULTICAST and not flags & codec.FLAG_NOSUBSCRIBE)


# ---------------------------------------------------------------- the client's connection


class Clock:
    def __init__(self) -> None:
        self.now = T0
        self.tokens = 0

    def token(self, size: int) -> bytes:
        self.tokens += 1
        return self.tokens.to_bytes(size, "big")


def connection(clock: Clock, **tracker) -> BackboneConnection:
    options = ConnectionOptions(flags=codec.FLAG_BATCH | codec.FLAG_HEAD, keepalive_interval=0.5, multicast=True,
                                tracker=TrackerOptions(**tracker))
    conn = BackboneConnection(BACKBONE, options, token_source=clock.token)
    conn.track()
    return conn


def keepalive_flags(datagrams: list[bytes]) -> list[int]:
    return [f.flags for d in datagrams if d[0] == codec.KEEPALIVE for f in codec.decode(d)]


def ack(conn: BackboneConnection, clock: Clock, head: int):
    """Answer the latest KEEPALIVE with HEAD ``head``."""
    datagrams, _ = conn.handle_timers(clock.now)
    token = clock.tokens.to_bytes(codec.TOKEN_SIZE, "big")
    return conn.receive(codec.encode(KeepaliveAck(token, head)), BACKBONE, clock.now), datagrams


def group_deliver(conn: BackboneConnection, clock: Clock, first: int, count: int = 1, source=BACKBONE):
    data = codec.pack([Deliver(seq, b"m%d" % seq) for seq in range(first, first + count)])
    return conn.receive_group(data, source, clock.now)


def test_a_joined_client_says_multicast_in_its_keepalives_and_a_publisher_never_does():
    clock = Clock()
    conn = connection(clock)
    assert keepalive_flags(conn.handle_timers(clock.now)[0]) == [
        codec.FLAG_BATCH | codec.FLAG_HEAD | codec.FLAG_MULTICAST | codec.FLAG_GONE]
    with pytest.raises(ValueError, match="multicast needs a subscriber"):
        ConnectionOptions(flags=codec.FLAG_NOSUBSCRIBE, multicast=True)  # a publisher never joins
    without_head = BackboneConnection(BACKBONE, ConnectionOptions(flags=codec.FLAG_BATCH, multicast=True))
    assert without_head.flags == codec.FLAG_BATCH | codec.FLAG_MULTICAST | codec.FLAG_HEAD | codec.FLAG_GONE  # HEAD: the fallback
    assert without_head.options.flags == codec.FLAG_BATCH  # as asked: MULTICAST and HEAD are the connection's
    plain = BackboneConnection(BACKBONE, ConnectionOptions(flags=codec.FLAG_BATCH))
    assert plain.group_watch is None and plain.receive_group(codec.encode_deliver(1, b"x"), BACKBONE, T0).stored


def test_group_datagrams_are_taken_in_order_like_unicast_ones():
    clock = Clock()
    conn = connection(clock)
    incoming = group_deliver(conn, clock, 1, 3)
    assert [e.seq for e in incoming.events] == [1, 2, 3] and incoming.from_backbone
    assert [seq for seq, _ in incoming.stored] == [1, 2, 3]
    assert group_deliver(conn, clock, 2).events == []  # a copy (unicast and group overlapping) is a duplicate
    assert conn.stats["multicast datagrams"] == 2


@given(st.binary(max_size=80), st.sampled_from([STRANGER, ("10.0.0.100", 2324), ("127.0.0.1", 2323)]))
def test_nothing_on_the_group_counts_unless_it_comes_from_the_backbone(data, source):
    clock = Clock()
    conn = connection(clock)
    conn.receive(codec.encode_deliver(1, b"first"), BACKBONE, clock.now)
    conn.handle_timers(clock.now + 1)  # hole 2.. requested by nobody: a REQUEST would make strangers' DELIVERs count
    incoming = conn.receive_group(data, source, clock.now)
    assert incoming.stored == [] and incoming.events == [] and not incoming.forwards
    assert conn.stats["multicast from strangers"] == 1


def test_a_forged_group_datagram_does_not_fill_even_a_requested_hole():
    clock = Clock()
    conn = connection(clock, request_delay=0.0)
    group_deliver(conn, clock, 1)
    group_deliver(conn, clock, 3)
    requests, _ = conn.handle_timers(clock.now + 0.1)
    assert any(d[0] == codec.REQUEST for d in requests)
    assert conn.tracker.awaits(2)
    assert group_deliver(conn, clock, 2, source=STRANGER).stored == []  # unicast, a peer's copy would count
    assert conn.tracker.awaits(2)
    assert [e.seq for e in group_deliver(conn, clock, 2).events] == [2, 3]


@pytest.mark.parametrize("frame", [codec.encode(KeepaliveAck(bytes(16), 5)), codec.encode_confirm(1, 1),
                                   codec.encode(Forward("10.0.0.1", 1, 1, 1)), b""])
def test_only_delivers_count_on_the_group_even_from_the_backbone(frame):
    clock = Clock()
    conn = connection(clock)
    incoming = conn.receive_group(frame, BACKBONE, clock.now)
    assert not incoming.acked and not incoming.confirms and not incoming.forwards
    assert conn.stats["multicast non-DELIVERs"] == 1


def test_a_silent_group_while_head_advances_falls_back_once_and_loses_nothing():
    clock = Clock()
    conn = connection(clock, request_delay=0.0, head_delay=0.0)
    after = conn.group_watch.after
    assert after == 4 * 0.5
    assert not ack(conn, clock, 10)[0].fell_back  # sequenced before the join: not the group's
    group_deliver(conn, clock, 11, 2)
    fell = []
    sent_out: list[bytes] = []
    for step in range(40):  # the group goes silent; the backbone goes on sequencing
        clock.now = T0 + 0.5 * (step + 1)
        incoming, datagrams = ack(conn, clock, 12 + step)
        sent_out += datagrams
        fell.append(incoming.fell_back)
        if incoming.fell_back:
            break
    assert fell.count(True) == 1 and conn.stats["multicast fallbacks"] == 1
    first = len(fell) - 1
    silent_from = T0 + 0.5 * 2  # the first ACK with a HEAD the group had not brought (13 > 12)
    assert T0 + 0.5 * (first + 1) - silent_from >= after > T0 + 0.5 * first - silent_from
    head = 12 + first
    datagrams, _ = conn.handle_timers(clock.now)  # a KEEPALIVE without the flag at once, and REQUESTs for the gap
    assert keepalive_flags(datagrams) == [codec.FLAG_BATCH | codec.FLAG_HEAD | codec.FLAG_GONE]
    sent_out += datagrams
    asked = {seq for d in sent_out if d[0] == codec.REQUEST for r in codec.decode(d)
             for seq in range(r.from_seq, r.to_seq + 1)}
    assert asked == set(range(13, head + 1))  # every message the group did not bring, asked for
    for step in range(10):  # HEAD keeps moving, the group stays silent: no second fallback
        clock.now += 0.5
        assert not ack(conn, clock, head + step + 1)[0].fell_back
    repair = codec.pack([Deliver(seq, b"r") for seq in range(13, head + 1)])
    events = conn.receive(repair, BACKBONE, clock.now).events  # unicast re-DELIVERs (or a peer's)
    assert [e.seq for e in events] == list(range(13, head + 1)) and not any(isinstance(e, Lost) for e in events)


def test_an_idle_backbone_never_looks_like_a_silent_group():
    clock = Clock()
    conn = connection(clock)
    ack(conn, clock, 0)
    group_deliver(conn, clock, 1, 5)
    for _step in range(100):
        clock.now += 0.5
        assert not ack(conn, clock, 5)[0].fell_back
    assert conn.flags & codec.FLAG_MULTICAST


def test_any_group_datagram_ends_the_silence():
    clock = Clock()
    conn = connection(clock)
    ack(conn, clock, 0)
    seq = 0
    for step in range(100):  # the group brings something every 1.5 s (under after = 2 s), HEAD always ahead
        clock.now += 0.5
        if step % 3 == 2:
            seq += 1
            group_deliver(conn, clock, seq)
        assert not ack(conn, clock, seq + 100)[0].fell_back
    assert conn.flags & codec.FLAG_MULTICAST


def test_a_client_that_never_acks_head_never_falls_back():
    clock = Clock()
    conn = connection(clock)
    for _step in range(50):
        clock.now += 0.5
        datagrams, _ = conn.handle_timers(clock.now)
        token = clock.tokens.to_bytes(codec.TOKEN_SIZE, "big")
        assert not conn.receive(codec.encode(KeepaliveAck(token)), BACKBONE, clock.now).fell_back


events = st.lists(st.one_of(
    st.tuples(st.just("group"), st.integers(0, 5)),  # a group datagram this far beyond the group's high
    st.tuples(st.just("head"), st.integers(0, 5)),  # an ACK with HEAD this far beyond the group's high
    st.tuples(st.just("wait"), st.floats(0.0, 3.0)),
), max_size=60)


@given(events, st.floats(0.1, 5.0))
def test_group_watch_falls_back_exactly_when_head_stayed_ahead_of_a_silent_group_long_enough(script, after):
    watch = GroupWatch(after)
    now = 0.0
    high: int | None = None
    ahead_since: float | None = None  # the reference: when HEAD first got ahead of a silent group
    fallbacks = 0
    for kind, value in script:
        if kind == "wait":
            now += value
        elif kind == "group":
            high = (high or 0) + value + 1
            watch.datagram(high)
            ahead_since = None
        else:
            head = (high or 0) + value
            expected = False
            if fallbacks == 0:
                if high is None:
                    high = head
                elif head <= high:
                    ahead_since = None
                elif ahead_since is None:
                    ahead_since = now
                elif now - ahead_since >= after:
                    expected = True
            fell = watch.head(head, now)
            assert fell == expected
            fallbacks += fell
    assert fallbacks <= 1 and watch.joined == (fallbacks == 0)


def test_the_fallback_notice_names_the_group_the_backbone_and_where_to_look():
    line = fallback_notice(GROUP, BACKBONE)
    assert "239.255.0.1:2324" in line and "10.0.0.100:2323" in line and "IGMP" in line and "\n" not in line



def test_a_stream_the_group_never_reached_starts_where_tracking_began_once_fallen_back():
    clock = Clock()
    options = ConnectionOptions(flags=codec.FLAG_BATCH | codec.FLAG_HEAD, keepalive_interval=0.5, multicast=True,
                                tracker=TrackerOptions(request_delay=0.0, head_delay=0.0))
    conn = BackboneConnection(BACKBONE, options, token_source=clock.token)
    ack(conn, clock, 7)  # joined at HEAD 7
    clock.now += 0.5
    ack(conn, clock, 9)
    conn.track()  # subscribed at HEAD 9: the stream is 10, 11, ...
    sent_out: list[bytes] = []
    while not conn.stats["multicast fallbacks"] and clock.now < T0 + 30:
        clock.now += 0.5
        incoming, datagrams = ack(conn, clock, int((clock.now - T0) * 10))
        sent_out += datagrams
    assert conn.stats["multicast fallbacks"] == 1 and conn.tracker.next == 10
    head = int((clock.now - T0) * 10)
    sent_out += conn.handle_timers(clock.now)[0]
    asked = {seq for d in sent_out if d[0] == codec.REQUEST for r in codec.decode(d)
             for seq in range(r.from_seq, r.to_seq + 1)}
    assert asked == set(range(10, head + 1))
    events = conn.receive(codec.pack([Deliver(seq, b"u") for seq in range(10, head + 1)]), BACKBONE, clock.now).events
    assert [e.seq for e in events] == list(range(10, head + 1))
