"""Address validation in the pure core and the pure client connection (docs/protocol.md, "Address validation").

A validating backbone sends an address that has not echoed its cookie nothing
but one COOKIE (no larger than the KEEPALIVE that asked) per slot: no ACK, no
DELIVER, no FORWARD, no CONFIRM, no re-delivery, no GONE.  Once the address
echoes the cookie it is an ordinary client, and a client that keeps talking
gets a fresh cookie in an ACK before its own expires.
"""
from __future__ import annotations

import ipaddress
import random
from collections import Counter

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from memnet import BACKBONE, MemoryNetwork

from fyrehose.backbone.cookies import SLOT_SECONDS, CookieJar
from fyrehose.backbone.core import Backbone
from fyrehose.protocol import codec
from fyrehose.protocol.connection import BackboneConnection, ConnectionOptions
from fyrehose.protocol.tracker import Message

KEY = bytes(range(32))
T0 = 1000.0
A = ("10.0.0.1", 5001)
J = ("10.0.0.9", 5009)  # a journaling client
P = ("10.0.0.7", 5007)  # a publisher
VICTIM = ("10.0.0.66", 7777)
SUBSCRIBE = codec.FLAG_BATCH | codec.FLAG_HEAD | codec.FLAG_GONE | codec.FLAG_REDELIVERING


def validating(**options) -> Backbone:
    return Backbone(cookies=CookieJar(KEY), rng=random.Random(1), **options)


def keepalive(flags: int = SUBSCRIBE, cookie: bytes = b"", token: bytes = bytes(16), addr: str = "0.0.0.0",
              port: int = 0) -> bytes:
    return codec.encode(codec.Keepalive(addr, port, flags, token, cookie=cookie))


def sends(bb: Backbone, now: float) -> list[tuple[bytes, tuple[str, int]]]:
    return [(bytes(data), addr) for data, addr in bb.flush(now).sends]


def validate(bb: Backbone, client, now: float, flags: int = SUBSCRIBE) -> None:
    """The handshake a fyrehose client makes: a KEEPALIVE, the COOKIE, the KEEPALIVE echoing it, the ACK."""
    bb.receive(keepalive(flags), client, now)
    (cookie_frame, to), = sends(bb, now)
    assert to == client and cookie_frame[0] == codec.COOKIE
    bb.receive(keepalive(flags, codec.decode_cookie(cookie_frame)), client, now)
    (ack, to), = sends(bb, now)
    assert to == client and ack[0] == codec.KEEPALIVE_ACK


def test_an_unvalidated_keepalive_gets_only_a_small_cookie_and_no_stream():
    bb = validating()
    bb.receive(keepalive(), VICTIM, T0)
    out = sends(bb, T0)
    assert out == [(codec.encode_cookie(CookieJar(KEY).cookie(VICTIM, T0)), VICTIM)]
    assert len(out[0][0]) == codec.COOKIE_FRAME_SIZE < codec.KEEPALIVE_SIZE
    assert len(bb.clients) == 0
    bb.receive(codec.encode_push(b"x" * 200, 0), P, T0)
    assert sends(bb, T0) == []  # the stream does not go to an address that echoed nothing
    assert bb.counters["cookies"] == 1


def test_the_echo_makes_an_ordinary_client():
    bb = validating()
    validate(bb, A, T0)
    bb.receive(codec.encode_push(b"hello", 0), P, T0)
    assert sends(bb, T0) == [(codec.encode_deliver(1, b"hello"), A)]


def test_one_cookie_answer_per_address_and_slot_however_many_keepalives():
    bb = validating()
    received = Counter()
    now = T0
    for i in range(200):  # 200 forged KEEPALIVEs over 10 slots, each naming the victim
        now = T0 + i * SLOT_SECONDS / 20
        bb.receive(keepalive(token=i.to_bytes(16, "big")), VICTIM, now)
        for data, to in sends(bb, now):
            assert to == VICTIM and data[0] == codec.COOKIE
            received[CookieJar(KEY).slot(now)] += 1
    assert max(received.values()) == 1
    assert sum(received.values()) <= (now - T0) / SLOT_SECONDS + 1
    assert bb.counters["drop:unvalidated address"] == 200 - sum(received.values())


def test_a_legacy_or_forged_keepalive_is_not_served():
    bb = validating()
    bb.receive(codec.encode(codec.Keepalive(legacy=True)), VICTIM, T0)
    assert sends(bb, T0) == []  # 7 bytes cannot buy a 9-byte COOKIE, and cannot echo one
    assert bb.counters["drop:unvalidated address"] == 1
    bb.receive(keepalive(cookie=bytes(8)), VICTIM, T0)
    (frame, _), = sends(bb, T0)
    assert frame[0] == codec.COOKIE and bb.counters["drop:bad cookie"] == 1
    other = CookieJar(KEY).cookie(("10.0.0.67", 7777), T0)  # another address's cookie
    bb.receive(keepalive(cookie=other), VICTIM, T0)
    assert sends(bb, T0) == [] and bb.counters["drop:bad cookie"] == 2  # its slot's COOKIE went already
    assert len(bb.clients) == 0


def test_an_expired_cookie_gets_a_new_cookie_not_the_stream():
    bb = validating()
    old = CookieJar(KEY).cookie(A, T0)
    bb.receive(keepalive(cookie=old), A, T0 + 2 * SLOT_SECONDS)
    (frame, to), = sends(bb, T0 + 2 * SLOT_SECONDS)
    assert to == A and frame == codec.encode_cookie(CookieJar(KEY).cookie(A, T0 + 2 * SLOT_SECONDS))
    assert len(bb.clients) == 0


def test_a_cookie_of_the_previous_slot_is_served_and_renewed_in_the_ack():
    bb = validating()
    jar = CookieJar(KEY)
    cookie = jar.cookie(A, T0)
    later = T0 + SLOT_SECONDS
    token = b"t" * 16
    bb.receive(keepalive(cookie=cookie, token=token), A, later)
    (ack, _), = sends(bb, later)
    decoded, = codec.decode(ack)
    assert decoded == codec.KeepaliveAck(token, 0, jar.cookie(A, later))  # HEAD, then the fresh cookie
    assert len(ack) <= len(keepalive(cookie=cookie))
    bb.receive(keepalive(cookie=decoded.cookie, token=token), A, later)
    (ack, _), = sends(bb, later)
    assert codec.decode(ack) == [codec.KeepaliveAck(token, 0)]  # a current cookie: a plain ACK


def test_no_forward_gone_or_redelivery_for_an_unvalidated_requester():
    bb = validating(recent_bytes=1 << 20)
    validate(bb, J, T0)
    for i in range(50):
        bb.receive(codec.encode_push(b"m%d" % i, 0), P, T0)
    sends(bb, T0)
    bb.gone.append((1, 3, codec.GONE_LOST))
    request = codec.encode(codec.Request("0.0.0.0", 0, 1, 50))
    for now in (T0 + 0.1, T0 + 0.2, T0 + 0.3):  # asked again: the backbone would answer from its own log
        bb.receive(request, VICTIM, now)
        assert sends(bb, now) == []
    assert bb.counters["drop:unvalidated address"] == 3
    assert bb.counters["forwards"] == 0


def test_a_validated_requester_is_served_as_before():
    bb = validating()
    validate(bb, J, T0)
    validate(bb, A, T0)
    bb.receive(codec.encode_push(b"m", 0), P, T0)
    sends(bb, T0)
    bb.receive(codec.encode(codec.Request("0.0.0.0", 0, 1, 1)), A, T0)
    assert sends(bb, T0) == [(codec.encode(codec.Forward(A[0], A[1], 1, 1)), J)]


def test_confirms_go_only_to_a_validated_publisher():
    bb = validating()
    bb.receive(codec.encode_push(b"", 7), VICTIM, T0)  # a 9-byte PUSH would buy a 13-byte CONFIRM
    assert sends(bb, T0) == []
    assert bb.sequence.last_issued == 1  # sequenced all the same (backbone rule 5)
    validate(bb, VICTIM, T0, codec.FLAG_NOSUBSCRIBE | codec.FLAG_NOJOURNAL)
    bb.receive(codec.encode_push(b"", 7), VICTIM, T0)  # the retry, once validated: its first number
    assert sends(bb, T0) == [(codec.encode_confirm(7, 1), VICTIM)]


def test_trusted_networks_are_served_without_a_cookie():
    bb = validating(trusted_networks=(ipaddress.IPv4Network("10.0.0.0/24"),))
    bb.receive(codec.encode(codec.Keepalive(legacy=True)), A, T0)  # a base-protocol client
    (ack, to), = sends(bb, T0)
    assert to == A and ack == bytes((codec.KEEPALIVE_ACK,)) + bytes(16)
    bb.receive(codec.encode_push(b"x", 0), P, T0)
    assert sends(bb, T0) == [(codec.encode_deliver(1, b"x"), A)]


def test_without_validation_nothing_changes():
    bb = Backbone()
    bb.receive(keepalive(flags=0), VICTIM, T0)
    (ack, _), = sends(bb, T0)
    assert ack[0] == codec.KEEPALIVE_ACK and len(ack) == codec.KEEPALIVE_ACK_SIZE
    assert bb.counters["cookies"] == 0


# ------------------------------------------------------------ the amplification property


@st.composite
def attacks(draw):
    """Datagrams from a forging source: KEEPALIVEs (legacy, plain, with random or stale cookies, with arbitrary
    bytes after the header), REQUESTs and empty PUSHes, each with a time step."""
    jar = CookieJar(KEY)
    kind = draw(st.sampled_from(["plain", "legacy", "random cookie", "stale cookie", "bytes", "request", "push"]))
    flags = draw(st.integers(0, 0x7F))
    victim = draw(st.sampled_from([VICTIM, ("10.0.0.67", 7777), ("10.0.0.66", 7778)]))
    when = draw(st.floats(0, 3 * SLOT_SECONDS, allow_nan=False))
    if kind == "plain":
        data = keepalive(flags)
    elif kind == "legacy":
        data = codec.encode(codec.Keepalive(legacy=True))
    elif kind == "random cookie":
        data = keepalive(flags, draw(st.binary(min_size=8, max_size=8)))
    elif kind == "stale cookie":
        data = keepalive(flags, jar.cookie(victim, T0 - 2 * SLOT_SECONDS))
    elif kind == "bytes":
        data = bytes((codec.KEEPALIVE,)) + draw(st.binary(max_size=64))
    elif kind == "request":
        data = codec.encode(codec.Request("0.0.0.0", 0, 1, draw(st.integers(1, 100))))
    else:
        data = codec.encode_push(b"", draw(st.integers(0, 100)))
    return data, victim, when


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(attacks(), min_size=1, max_size=80))
def test_forged_datagrams_buy_their_victims_at_most_one_small_datagram_per_slot(attack):
    bb = validating(recent_bytes=1 << 20)
    validate(bb, J, T0)  # a journaling client that would serve FORWARDs
    jar = CookieJar(KEY)
    now = T0
    sent: Counter = Counter()  # bytes each victim sent
    got: list[tuple[bytes, tuple[str, int], int]] = []
    for i, (data, victim, step) in enumerate(sorted(attack, key=lambda a: a[2])):
        now = T0 + step
        bb.receive(keepalive(SUBSCRIBE, jar.cookie(J, now)), J, now)  # the journaling client stays
        bb.receive(data, victim, now)
        sent[victim] += len(data)
        bb.receive(codec.encode_push(b"payload %d" % i, 0), P, now)  # the stream goes on meanwhile
        got += [(data, to, jar.slot(now)) for data, to in sends(bb, now)]
    for data, to, _ in got:
        assert to == J or data[0] == codec.COOKIE, (data, to)  # only the validated client gets the stream
    cookies = Counter((to, slot) for data, to, slot in got if to != J)
    assert all(count == 1 for count in cookies.values())
    for victim, total in sent.items():
        answered = sum(len(data) for data, to, _ in got if to == victim)
        assert answered <= total
    assert [addr for addr, _, _ in bb.clients.members(now)] == [J]


# ------------------------------------------------------------ the client's side


def connection(**options) -> BackboneConnection:
    tokens = iter(range(1, 1 << 30))
    return BackboneConnection(BACKBONE, ConnectionOptions(flags=codec.FLAG_BATCH, **options),
                              token_source=lambda size: next(tokens).to_bytes(size, "big"))


def test_the_connection_echoes_a_cookie_at_once():
    conn = connection()
    first, = conn.handle_timers(T0)[0]
    assert len(first) == codec.KEEPALIVE_SIZE  # no cookie before a backbone asks for one
    cookie = b"C" * 8
    incoming = conn.receive(codec.encode_cookie(cookie), BACKBONE, T0 + 0.001)
    assert not incoming.acked
    assert conn.next_deadline() <= T0 + 0.001  # the next KEEPALIVE goes now, not a keepalive interval later
    echo, = conn.handle_timers(T0 + 0.001)[0]
    decoded, = codec.decode(echo)
    assert decoded.cookie == cookie and len(echo) == codec.KEEPALIVE_COOKIE_SIZE
    assert codec.decode(conn.goodbye())[0].cookie == cookie


def test_a_cookie_from_a_stranger_is_dropped():
    conn = connection()
    conn.handle_timers(T0)
    conn.receive(codec.encode_cookie(b"C" * 8), ("10.9.9.9", 2323), T0)
    assert conn.stats["COOKIE from strangers"] == 1
    assert len(conn.handle_timers(T0 + 1)[0][0]) == codec.KEEPALIVE_SIZE


def test_the_connection_takes_the_fresh_cookie_of_an_ack():
    conn = connection()
    conn.handle_timers(T0)
    conn.receive(codec.encode_cookie(b"C" * 8), BACKBONE, T0)
    token = codec.decode(conn.handle_timers(T0)[0][0])[0].token
    ack = codec.encode(codec.KeepaliveAck(token, cookie=b"D" * 8))
    assert conn.receive(ack, BACKBONE, T0 + 0.01).acked
    assert codec.decode(conn.handle_timers(T0 + 1)[0][0])[0].cookie == b"D" * 8


def test_a_silent_backbone_makes_the_connection_forget_its_cookie():
    conn = connection(keepalive_interval=0.5)
    conn.handle_timers(T0)
    conn.receive(codec.encode_cookie(b"C" * 8), BACKBONE, T0)
    assert codec.decode(conn.handle_timers(T0 + 1.0)[0][0])[0].cookie == b"C" * 8
    assert codec.decode(conn.handle_timers(T0 + 2.5)[0][0])[0].cookie == b""  # 4 intervals unanswered
    assert conn.stats["cookies dropped"] == 1


def test_clients_keep_the_stream_across_many_slots_in_memory():
    """Real connections against the validating core: subscribed at once, never refused while they talk."""
    net = MemoryNetwork()
    net.backbone = validating()
    publisher = net.client(6000, subscribe=False)
    subscriber = net.client(6001)
    net.run(0.2)
    assert subscriber.connection.last_ack is not None and publisher.connection.last_ack is not None
    for i in range(60):  # one message every half second for six slots
        net.publish(publisher, [b"m%d" % i])
        net.run(SLOT_SECONDS / 20)
    net.run(1.0)
    assert [m.seq for m in subscriber.messages] == list(range(1, 61))
    assert len(publisher.confirms) == 60
    assert net.backbone.counters["cookies"] == 2  # one each, at the start: after that the ACKs renew them
    assert net.backbone.counters["drop:bad cookie"] == 0
    assert all(isinstance(m, Message) for m in subscriber.events)


def test_the_multi_process_record_of_a_keepalive_keeps_its_renew_flag():
    """The receive workers check the cookies; the sequencer, which writes the ACK, learns from the record whether
    the ACK must carry a fresh cookie."""
    from fyrehose.backbone.intake import KeepaliveIn
    from fyrehose.backbone.multiprocess import records

    for renew in (False, True):
        accepted = KeepaliveIn(A, SUBSCRIBE, b"t" * 16, renew)
        kind, source, body = records.unpack_ingress(memoryview(records.pack_control(accepted, A, 0)))
        assert (kind, source, body) == (records.KEEPALIVE_RECORD, A, accepted)
