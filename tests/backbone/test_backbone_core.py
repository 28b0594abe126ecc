"""Tests of the pure backbone state machine (fyrehose.backbone.core.Backbone).

Each test drives Backbone.receive()/flush() with hand-built datagrams and
checks the datagrams it asks to send against the backbone rules and the
extensions of docs/protocol.md.  No sockets.
"""
from __future__ import annotations

import ipaddress
import random

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from fyrehose.backbone.core import Backbone
from fyrehose.protocol import codec
from fyrehose.protocol.codec import Confirm, Deliver, Forward, Keepalive, KeepaliveAck, Push, Request

PUB = ("10.9.9.9", 4000)  # a publisher that never sends a KEEPALIVE
A = ("10.0.0.1", 5001)
B = ("10.0.0.2", 5002)
C = ("10.0.0.3", 5003)
D = ("10.0.0.4", 5004)
T0 = 1000.0


# ---------------------------------------------------------------- helpers


def sends(out) -> list[tuple[bytes, tuple[str, int]]]:
    result = []
    for data, addr in out.sends:
        assert isinstance(data, (bytes, bytearray, memoryview))
        result.append((bytes(data), addr))
    return result


def to(out_sends, addr):
    return [data for data, a in out_sends if a == addr]


def frames_to(out_sends, addr, kind=None):
    result = []
    for data in to(out_sends, addr):
        for frame in codec.decode(data):
            if kind is None or isinstance(frame, kind):
                result.append(frame)
    return result


def delivered_seqs(out_sends, addr):
    return [f.seq for f in frames_to(out_sends, addr, Deliver)]


def ka(bb, source, now, flags=0, token=None, addr="0.0.0.0", port=0):
    token = token if token is not None else bytes(16)
    bb.receive(codec.encode(Keepalive(addr, port, flags, token)), source, now)


def push(bb, source, now, *payloads, tag=0):
    bb.receive(codec.pack([Push(p, tag) for p in payloads]), source, now)


def request(bb, source, now, lo, hi, addr="0.0.0.0", port=0):
    bb.receive(codec.encode(Request(addr, port, lo, hi)), source, now)


def drops(bb) -> int:
    return sum(v for k, v in bb.counters.items() if k.startswith("drop:"))


# ---------------------------------------------------------------- rule 1: KEEPALIVE-ACK


def test_keepalive_ack_echoes_token_to_source():
    bb = Backbone()
    token = bytes(range(100, 116))
    ka(bb, A, T0, token=token)
    out = sends(bb.flush(T0))
    assert out == [(b"\x20" + token, A)]
    assert codec.decode(out[0][0]) == [KeepaliveAck(token)]


def test_every_keepalive_gets_its_own_ack():
    bb = Backbone()
    tokens = [bytes([i]) * 16 for i in range(1, 6)]
    for i, token in enumerate(tokens):
        ka(bb, A, T0 + i * 0.1, token=token)
    out = sends(bb.flush(T0 + 1))
    assert out == [(b"\x20" + t, A) for t in tokens]


def test_ack_goes_to_source_even_when_keepalive_names_another_port():
    bb = Backbone()
    ka(bb, A, T0, token=b"k" * 16, addr=A[0], port=7777)
    out = sends(bb.flush(T0))
    assert out == [(b"\x20" + b"k" * 16, A)]
    push(bb, PUB, T0, b"m")
    out = sends(bb.flush(T0))
    assert delivered_seqs(out, (A[0], 7777)) == [1]
    assert to(out, A) == []


def test_legacy_keepalive_is_acked_and_subscribes_with_flags_zero():
    bb = Backbone(rng=random.Random(3))
    legacy = bytes([0x10, 0x0A, 0x00, 0x00, 0x01, 0x13, 0x89])  # 10.0.0.1:5001, 7 bytes
    bb.receive(legacy, A, T0)
    out = sends(bb.flush(T0))
    assert out == [(b"\x20" + bytes(16), A)]
    push(bb, PUB, T0, b"hello")
    out = sends(bb.flush(T0))
    assert to(out, A) == [codec.encode_deliver(1, b"hello")]
    # flags 0: it journals too
    request(bb, B, T0, 1, 1)
    out = sends(bb.flush(T0))
    assert frames_to(out, A) == [Forward(B[0], B[1], 1, 1)]


def test_legacy_keepalive_with_zero_address_means_source():
    bb = Backbone()
    bb.receive(codec.encode(Keepalive(legacy=True)), A, T0)
    out = sends(bb.flush(T0))
    assert out == [(b"\x20" + bytes(16), A)]
    push(bb, PUB, T0, b"x")
    assert delivered_seqs(sends(bb.flush(T0)), A) == [1]


# ---------------------------------------------------------------- rule 2: five seconds of subscription


def test_subscriber_for_exactly_five_seconds():
    bb = Backbone()
    ka(bb, A, T0)
    bb.flush(T0)
    push(bb, PUB, T0 + 4.9, b"in time")
    assert delivered_seqs(sends(bb.flush(T0 + 4.9)), A) == [1]
    push(bb, PUB, T0 + 5.0, b"too late")
    assert to(sends(bb.flush(T0 + 5.0)), A) == []


def test_keepalive_refreshes_the_five_seconds():
    bb = Backbone()
    ka(bb, A, T0)
    ka(bb, A, T0 + 3.0)
    bb.flush(T0 + 3.0)
    push(bb, PUB, T0 + 5.5, b"a")
    assert delivered_seqs(sends(bb.flush(T0 + 5.5)), A) == [1]
    push(bb, PUB, T0 + 7.9, b"b")
    assert delivered_seqs(sends(bb.flush(T0 + 7.9)), A) == [2]
    push(bb, PUB, T0 + 8.0, b"c")
    assert to(sends(bb.flush(T0 + 8.0)), A) == []


def test_expired_client_comes_back_with_a_new_keepalive():
    bb = Backbone()
    ka(bb, A, T0)
    bb.flush(T0)
    push(bb, PUB, T0 + 6, b"a")
    assert to(sends(bb.flush(T0 + 6)), A) == []
    ka(bb, A, T0 + 7)
    push(bb, PUB, T0 + 7, b"b")
    assert delivered_seqs(sends(bb.flush(T0 + 7)), A) == [2]


def test_nosubscribe_client_gets_ack_but_no_delivery():
    bb = Backbone()
    ka(bb, A, T0, flags=codec.FLAG_NOSUBSCRIBE, token=b"n" * 16)
    ka(bb, B, T0)
    assert sends(bb.flush(T0)) == [(b"\x20" + b"n" * 16, A), (b"\x20" + bytes(16), B)]
    push(bb, PUB, T0 + 1, b"x")
    out = sends(bb.flush(T0 + 1))
    assert to(out, A) == []
    assert delivered_seqs(out, B) == [1]


def test_flags_follow_the_latest_keepalive():
    bb = Backbone()
    ka(bb, A, T0, flags=codec.FLAG_NOSUBSCRIBE)
    push(bb, PUB, T0, b"1")
    assert to(sends(bb.flush(T0)), A) == [b"\x20" + bytes(16)]
    ka(bb, A, T0 + 1, flags=0)
    push(bb, PUB, T0 + 1, b"2")
    assert delivered_seqs(sends(bb.flush(T0 + 1)), A) == [2]
    ka(bb, A, T0 + 2, flags=codec.FLAG_NOSUBSCRIBE)
    push(bb, PUB, T0 + 2, b"3")
    assert to(sends(bb.flush(T0 + 2)), A) == [b"\x20" + bytes(16)]


# ---------------------------------------------------------------- rules 3 and 5: PUSH -> DELIVER


def test_push_from_never_seen_source_is_delivered_to_all_subscribers():
    bb = Backbone()
    for c in (A, B, C):
        ka(bb, c, T0)
    bb.flush(T0)
    push(bb, PUB, T0 + 0.5, b"payload")
    out = sends(bb.flush(T0 + 0.5))
    expected = codec.encode_deliver(1, b"payload")
    for c in (A, B, C):
        assert to(out, c) == [expected]
    assert to(out, PUB) == []  # tag 0 and not a subscriber: nothing back
    assert len(out) == 3


def test_publisher_that_subscribes_gets_its_own_message_back():
    bb = Backbone()
    ka(bb, A, T0)
    bb.flush(T0)
    push(bb, A, T0, b"mine")
    assert to(sends(bb.flush(T0)), A) == [codec.encode_deliver(1, b"mine")]


def test_sequences_start_at_one_and_are_continuous_across_datagrams():
    bb = Backbone()
    ka(bb, A, T0)
    bb.flush(T0)
    payloads = []
    all_seqs = []
    n = 0
    for i in range(10):
        batch = [f"m{i}-{j}".encode() for j in range(i % 4 + 1)]
        push(bb, (f"10.1.0.{i + 1}", 9000 + i), T0, *batch)
        payloads.extend(batch)
        if i % 3 == 2:
            out = sends(bb.flush(T0))
            all_seqs.extend(frames_to(out, A, Deliver))
        n += len(batch)
    all_seqs.extend(frames_to(sends(bb.flush(T0)), A, Deliver))
    assert [f.seq for f in all_seqs] == list(range(1, n + 1))
    assert [f.data for f in all_seqs] == payloads


def test_deliver_bytes_are_exact_and_tag_is_replaced_by_sequence():
    bb = Backbone()
    ka(bb, A, T0)
    bb.flush(T0)
    push(bb, PUB, T0, b"abc", tag=0xFFFFFFFFFFFF)
    out = sends(bb.flush(T0))
    assert to(out, A) == [b"\x01\x00\x03" + (1).to_bytes(6, "big") + b"abc"]


@settings(max_examples=300, deadline=None)
@given(payload=st.binary(max_size=40), tag=st.sampled_from([0, 0, 1, 1 << 47]), damage=st.one_of(
    st.none(), st.tuples(st.integers(0, 8), st.integers(0, 255))), issued=st.integers(0, 1 << 40),
    kind=st.sampled_from([bytes, bytearray, memoryview]))
def test_a_lone_push_frame_is_sequenced_as_the_protocol_says(payload, tag, damage, issued, kind):
    """The one-frame path (the latency path at low rates) against what a frame-by-frame scan of the datagram
    says: a well-formed frame becomes its DELIVER, numbered next, logged for re-delivery; anything else nothing."""
    frame = bytearray(codec.encode_push(payload, tag))
    if damage is not None:
        frame[damage[0]] = damage[1]
    bb = Backbone(reserved=issued)
    ka(bb, A, T0, flags=codec.FLAG_BATCH)
    bb.flush(T0)
    bb.receive(kind(bytes(frame)), PUB, T0)
    delivered = to(sends(bb.flush(T0)), A)
    spans, _ = codec.scan(bytes(frame), codec.PUSH)
    if frame[0] != codec.PUSH or not spans:
        assert delivered == [] and bb.counters["pushes"] == 0
        return
    (start, end, _), = spans
    expected = bytes([codec.DELIVER]) + bytes(frame[1:3]) + (issued + 1).to_bytes(6, "big") + bytes(frame[9:end])
    assert delivered == [expected] and bb.counters["pushes"] == 1
    assert [(seq, bytes(data)) for seq, data in bb.recent.frames(0, 1 << 48)] == [(issued + 1, expected)]


def test_empty_payload_push_is_sequenced():
    bb = Backbone()
    ka(bb, A, T0)
    bb.flush(T0)
    push(bb, PUB, T0, b"")
    assert to(sends(bb.flush(T0)), A) == [codec.encode_deliver(1, b"")]


def test_max_payload_push_is_delivered_and_one_more_byte_is_dropped():
    bb = Backbone()
    ka(bb, A, T0)
    ka(bb, B, T0, flags=codec.FLAG_BATCH)
    bb.flush(T0)
    big = bytes(range(256)) * 255 + bytes(65498 - 255 * 256)
    bb.receive(codec.encode_push(big), PUB, T0)
    out = sends(bb.flush(T0))
    assert to(out, A) == [codec.encode_deliver(1, big)]
    assert to(out, B) == [codec.encode_deliver(1, big)]
    before = drops(bb)
    oversize = b"\x02\xff\xdb" + bytes(6) + bytes(65499)  # LENGTH 65499, 65508 bytes
    bb.receive(oversize, PUB, T0)
    assert drops(bb) == before + 1
    assert sends(bb.flush(T0)) == []
    push(bb, PUB, T0, b"next")
    assert delivered_seqs(sends(bb.flush(T0)), A) == [2]


def test_plain_subscriber_gets_one_frame_per_datagram():
    bb = Backbone()
    ka(bb, A, T0)
    bb.flush(T0)
    push(bb, PUB, T0, b"a", b"bb", b"ccc", b"dddd", b"e")
    push(bb, B, T0, b"f", b"g")
    out = to(sends(bb.flush(T0)), A)
    assert len(out) == 7
    for i, data in enumerate(out):
        frames = codec.decode(data)
        assert len(frames) == 1
        assert frames[0].seq == i + 1
    assert [codec.decode(d)[0].data for d in out] == [b"a", b"bb", b"ccc", b"dddd", b"e", b"f", b"g"]


def test_batch_subscriber_gets_packed_frames_up_to_batch_bytes():
    bb = Backbone(batch_bytes=100)
    ka(bb, A, T0, flags=codec.FLAG_BATCH)
    ka(bb, B, T0)
    bb.flush(T0)
    # 20 frames of 29 bytes each (9 header + 20 payload): 3 fit in 100 bytes
    for i in range(10):
        bb.receive(codec.encode_push(bytes([i]) * 20), PUB, T0)
    push(bb, PUB, T0, *[bytes([10 + i]) * 20 for i in range(10)])
    out = sends(bb.flush(T0))
    batch = to(out, A)
    assert all(len(d) <= 100 for d in batch)
    assert [len(codec.decode(d)) for d in batch] == [3, 3, 3, 3, 3, 3, 2]
    frames = [f for d in batch for f in codec.decode(d)]
    assert [f.seq for f in frames] == list(range(1, 21))
    assert [f.data for f in frames] == [bytes([i]) * 20 for i in range(20)]
    # the plain subscriber of the same flush still gets one frame per datagram
    assert [len(codec.decode(d)) for d in to(out, B)] == [1] * 20


def test_batch_subscriber_default_batch_fills_one_datagram():
    bb = Backbone()
    ka(bb, A, T0, flags=codec.FLAG_BATCH)
    bb.flush(T0)
    for _ in range(5):
        bb.receive(codec.encode_push(bytes(30000)), PUB, T0)
    batch = to(sends(bb.flush(T0)), A)
    assert [len(d) for d in batch] == [60018, 60018, 30009]
    assert [f.seq for d in batch for f in codec.decode(d)] == [1, 2, 3, 4, 5]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.lists(st.binary(max_size=120), min_size=1, max_size=6), min_size=1, max_size=12),
    st.integers(min_value=130, max_value=1500),
)
def test_batch_packing_never_splits_a_frame_and_respects_batch_bytes(datagrams, limit):
    bb = Backbone(batch_bytes=limit)
    ka(bb, A, T0, flags=codec.FLAG_BATCH)
    bb.flush(T0)
    expected = []
    for payloads in datagrams:
        push(bb, PUB, T0, *payloads)
        expected.extend(payloads)
    batch = to(sends(bb.flush(T0)), A)
    frames = []
    sizes = []
    for d in batch:
        assert len(d) <= limit
        decoded = codec.decode(d)  # raises if a frame were split
        assert decoded
        frames.extend(decoded)
        sizes.append([9 + len(f.data) for f in decoded])
    assert [f.seq for f in frames] == list(range(1, len(expected) + 1))
    assert [f.data for f in frames] == expected
    # packing is greedy: the first frame of each datagram did not fit into the previous one
    for prev, cur in zip(sizes, sizes[1:]):
        assert sum(prev) + cur[0] > limit


# ---------------------------------------------------------------- packed PUSH with malformed frames


def test_packed_push_takes_frames_up_to_the_first_malformed_one():
    bb = Backbone()
    ka(bb, A, T0)
    bb.flush(T0)
    good = codec.pack([Push(b"one"), Push(b"two"), Push(b"three")])
    bad = b"\x02\x00\x10" + bytes(6) + b"short"  # LENGTH 16 runs past the end
    bb.receive(good + bad, PUB, T0)
    out = sends(bb.flush(T0))
    assert [f.data for f in frames_to(out, A, Deliver)] == [b"one", b"two", b"three"]
    assert delivered_seqs(out, A) == [1, 2, 3]
    assert bb.counters["drop:malformed"] == 1
    for data in to(out, A):
        assert b"short" not in data


@pytest.mark.parametrize(
    "bad",
    [
        codec.encode_deliver(7, b"x"),  # DELIVER inside a PUSH datagram
        codec.encode(Keepalive()),
        b"\x77" + bytes(20),
    ],
)
def test_packed_push_stops_at_foreign_frame_and_ignores_the_rest(bad):
    bb = Backbone()
    ka(bb, A, T0)
    bb.flush(T0)
    datagram = codec.pack([Push(b"a"), Push(b"b")]) + bad + codec.encode_push(b"after")
    bb.receive(datagram, PUB, T0)
    out = sends(bb.flush(T0))
    assert [f.data for f in frames_to(out, A, Deliver)] == [b"a", b"b"]
    assert bb.counters["drop:malformed"] == 1


def test_wholly_malformed_push_is_counted_and_not_sequenced():
    bb = Backbone()
    ka(bb, A, T0)
    bb.flush(T0)
    bb.receive(b"\x02\x00\x05" + bytes(6) + b"ab", PUB, T0)
    assert bb.counters["drop:malformed"] == 1
    assert sends(bb.flush(T0)) == []
    push(bb, PUB, T0, b"ok")
    assert delivered_seqs(sends(bb.flush(T0)), A) == [1]


# ---------------------------------------------------------------- CONFIRM


def test_tagged_push_is_confirmed_to_its_source():
    bb = Backbone()
    ka(bb, A, T0)
    bb.flush(T0)
    push(bb, PUB, T0, b"x", tag=0x0102030405)
    out = sends(bb.flush(T0))
    assert to(out, PUB) == [b"\x40" + (0x0102030405).to_bytes(6, "big") + (1).to_bytes(6, "big")]
    assert delivered_seqs(out, A) == [1]


def test_untagged_push_is_not_confirmed():
    bb = Backbone()
    push(bb, PUB, T0, b"x")
    out = sends(bb.flush(T0))
    assert frames_to(out, PUB) == []
    assert [f for data, _ in out for f in codec.decode(data) if isinstance(f, Confirm)] == []


def test_confirm_sent_without_any_subscriber():
    bb = Backbone()
    push(bb, PUB, T0, b"x", tag=9)
    assert sends(bb.flush(T0)) == [(codec.encode_confirm(9, 1), PUB)]


def test_packed_push_with_mixed_tags_confirms_only_nonzero_tags():
    bb = Backbone()
    ka(bb, A, T0)
    bb.flush(T0)
    frames = [Push(b"a", 11), Push(b"b", 0), Push(b"c", 13), Push(b"d", 0), Push(b"e", 15)]
    bb.receive(codec.pack(frames), PUB, T0)
    out = sends(bb.flush(T0))
    assert frames_to(out, PUB, Confirm) == [Confirm(11, 1), Confirm(13, 3), Confirm(15, 5)]
    assert delivered_seqs(out, A) == [1, 2, 3, 4, 5]


def test_retried_push_is_confirmed_again_with_same_sequence_and_not_delivered_twice():
    bb = Backbone()
    ka(bb, A, T0)
    ka(bb, B, T0, flags=codec.FLAG_BATCH)
    bb.flush(T0)
    push(bb, PUB, T0, b"important", tag=77)
    out = sends(bb.flush(T0))
    assert frames_to(out, PUB) == [Confirm(77, 1)]
    assert delivered_seqs(out, A) == [1]
    assert delivered_seqs(out, B) == [1]
    # the CONFIRM was lost: the publisher retries
    push(bb, PUB, T0 + 1, b"important", tag=77)
    out = sends(bb.flush(T0 + 1))
    assert frames_to(out, PUB) == [Confirm(77, 1)]
    assert delivered_seqs(out, A) == []
    assert delivered_seqs(out, B) == []
    # and the sequence goes on without a gap
    push(bb, PUB, T0 + 2, b"next", tag=78)
    out = sends(bb.flush(T0 + 2))
    assert frames_to(out, PUB) == [Confirm(78, 2)]
    assert delivered_seqs(out, A) == [2]
    assert delivered_seqs(out, B) == [2]


def test_retry_before_flush_is_not_delivered_twice():
    bb = Backbone()
    ka(bb, A, T0)
    bb.flush(T0)
    push(bb, PUB, T0, b"x", tag=5)
    push(bb, PUB, T0, b"x", tag=5)
    out = sends(bb.flush(T0))
    assert frames_to(out, PUB) == [Confirm(5, 1), Confirm(5, 1)]
    assert delivered_seqs(out, A) == [1]


def test_same_tag_from_another_source_is_a_new_message():
    bb = Backbone()
    ka(bb, A, T0)
    bb.flush(T0)
    push(bb, PUB, T0, b"x", tag=5)
    push(bb, C, T0, b"y", tag=5)
    out = sends(bb.flush(T0))
    assert frames_to(out, PUB) == [Confirm(5, 1)]
    assert frames_to(out, C) == [Confirm(5, 2)]
    assert delivered_seqs(out, A) == [1, 2]


@pytest.mark.parametrize("layout", ["dup-first", "dup-middle", "dup-last", "dup-both-ends"])
def test_retry_inside_a_packed_push_with_new_frames(layout):
    bb = Backbone()
    ka(bb, A, T0)
    ka(bb, B, T0, flags=codec.FLAG_BATCH)
    bb.flush(T0)
    push(bb, PUB, T0, b"old1", tag=1)
    push(bb, PUB, T0, b"old2", tag=2)
    bb.flush(T0)
    new = [Push(b"new3", 3), Push(b"new4", 4)]
    old1, old2 = Push(b"old1", 1), Push(b"old2", 2)
    frames = {
        "dup-first": [old1] + new,
        "dup-middle": [new[0], old1, new[1]],
        "dup-last": new + [old1],
        "dup-both-ends": [old1, new[0], new[1], old2],
    }[layout]
    bb.receive(codec.pack(frames), PUB, T0 + 1)
    out = sends(bb.flush(T0 + 1))
    expected_confirms = []
    next_seq = 3
    for f in frames:
        if f.tag in (1, 2):
            expected_confirms.append(Confirm(f.tag, f.tag))
        else:
            expected_confirms.append(Confirm(f.tag, next_seq))
            next_seq += 1
    assert sorted(frames_to(out, PUB, Confirm), key=lambda c: c.tag) == sorted(expected_confirms, key=lambda c: c.tag)
    for sub in (A, B):
        got = frames_to(out, sub, Deliver)
        assert [(f.seq, f.data) for f in got] == [(3, b"new3"), (4, b"new4")]
    # the plain subscriber still gets one frame per datagram
    assert all(len(codec.decode(d)) == 1 for d in to(out, A))


def test_same_tag_twice_in_one_packed_push_is_one_message():
    bb = Backbone()
    ka(bb, A, T0)
    bb.flush(T0)
    bb.receive(codec.pack([Push(b"a", 5), Push(b"a", 5)]), PUB, T0)
    out = sends(bb.flush(T0))
    assert delivered_seqs(out, A) == [1]
    assert frames_to(out, PUB, Confirm) == [Confirm(5, 1), Confirm(5, 1)]


def test_received_buffer_may_be_reused_by_the_driver():
    # a driver that recv_into()s one bytearray must not corrupt frames still waiting for flush
    bb = Backbone()
    ka(bb, A, T0)
    ka(bb, B, T0, flags=codec.FLAG_BATCH)
    bb.flush(T0)
    buf = bytearray(codec.pack([Push(b"first", 1), Push(b"second")]))
    bb.receive(buf, PUB, T0)
    buf[:] = bytes(len(buf))
    buf2 = bytearray(codec.encode_push(b"third"))
    bb.receive(memoryview(buf2), PUB, T0)
    buf2[:] = b"\xff" * len(buf2)
    out = sends(bb.flush(T0))
    for sub in (A, B):
        assert [(f.seq, f.data) for f in frames_to(out, sub, Deliver)] == [(1, b"first"), (2, b"second"), (3, b"third")]


def test_batch_publisher_gets_confirms_packed():
    bb = Backbone()
    ka(bb, A, T0, flags=codec.FLAG_BATCH | codec.FLAG_NOSUBSCRIBE)
    bb.flush(T0)
    push(bb, A, T0, b"a", b"b", b"c", tag=0)
    bb.receive(codec.pack([Push(b"d", 1), Push(b"e", 2), Push(b"f", 3)]), A, T0)
    out = sends(bb.flush(T0))
    assert frames_to(out, A, Confirm) == [Confirm(1, 4), Confirm(2, 5), Confirm(3, 6)]
    assert frames_to(out, A, Deliver) == []


# ---------------------------------------------------------------- rule 4: REQUEST -> FORWARD


def _with_history(bb, count=10):
    push(bb, PUB, T0, *[bytes([i]) for i in range(count)])


def test_request_becomes_forward_to_another_client():
    bb = Backbone(rng=random.Random(1))
    ka(bb, A, T0)
    ka(bb, B, T0)
    _with_history(bb)
    bb.flush(T0)
    request(bb, A, T0, 3, 7)
    out = sends(bb.flush(T0))
    assert out == [(codec.encode(Forward(A[0], A[1], 3, 7)), B)]
    assert codec.decode(out[0][0]) == [Forward("10.0.0.1", 5001, 3, 7)]


@pytest.mark.parametrize("seed", [0, 1, 2, 7])
def test_request_is_forwarded_randomly_to_every_eligible_client_but_never_the_requester(seed):
    bb = Backbone(rng=random.Random(seed), recent_bytes=0)  # repeats would also be re-delivered from its log
    clients = [(f"10.0.1.{i}", 6000 + i) for i in range(1, 6)]
    for c in clients:
        ka(bb, c, T0)
    ka(bb, ("10.0.2.1", 7000), T0, flags=codec.FLAG_NOJOURNAL)
    _with_history(bb)
    bb.flush(T0)
    requester = clients[0]
    chosen = []
    for _ in range(300):
        request(bb, requester, T0 + 1, 1, 2)
        out = sends(bb.flush(T0 + 1))
        assert len(out) == 1
        data, dest = out[0]
        assert codec.decode(data) == [Forward(requester[0], requester[1], 1, 2)]
        chosen.append(dest)
    assert requester not in chosen
    assert ("10.0.2.1", 7000) not in chosen
    assert set(chosen) == set(clients[1:])
    # no eligible client is starved
    for c in clients[1:]:
        assert chosen.count(c) >= 20


def test_request_from_a_non_client_can_go_to_any_journaler():
    bb = Backbone(rng=random.Random(5), recent_bytes=0)  # repeats would also be re-delivered from its log
    for c in (A, B, C):
        ka(bb, c, T0)
    _with_history(bb)
    bb.flush(T0)
    chosen = set()
    for _ in range(200):
        request(bb, PUB, T0, 1, 1)
        (data, dest), = sends(bb.flush(T0))
        chosen.add(dest)
    assert chosen == {A, B, C}


def test_nosubscribe_client_without_nojournal_still_gets_forwards():
    bb = Backbone(rng=random.Random(2))
    ka(bb, A, T0, flags=codec.FLAG_NOSUBSCRIBE)
    _with_history(bb)
    bb.flush(T0)
    request(bb, B, T0, 1, 1)
    assert sends(bb.flush(T0)) == [(codec.encode(Forward(B[0], B[1], 1, 1)), A)]


def test_no_forward_when_only_nojournal_clients():
    bb = Backbone(rng=random.Random(2), recent_bytes=0)
    ka(bb, A, T0, flags=codec.FLAG_NOJOURNAL)
    ka(bb, B, T0, flags=codec.FLAG_NOJOURNAL | codec.FLAG_BATCH)
    _with_history(bb)
    bb.flush(T0)
    request(bb, C, T0, 1, 1)
    assert sends(bb.flush(T0)) == []


def test_no_forward_to_expired_journaler():
    bb = Backbone(rng=random.Random(2), recent_bytes=0)
    ka(bb, A, T0)
    ka(bb, B, T0 + 3)
    _with_history(bb)
    bb.flush(T0)
    for _ in range(50):
        request(bb, C, T0 + 5.0, 1, 1)
        (data, dest), = sends(bb.flush(T0 + 5.0))
        assert dest == B
    request(bb, C, T0 + 8.0, 1, 1)
    assert sends(bb.flush(T0 + 8.0)) == []


def test_request_never_forwarded_back_to_the_only_journaler_requesting():
    bb = Backbone(rng=random.Random(2))
    ka(bb, A, T0)
    _with_history(bb)
    bb.flush(T0)
    request(bb, A, T0, 1, 1)
    assert all(dest != A or not isinstance(codec.decode(d)[0], Forward) for d, dest in sends(bb.flush(T0)))


def test_request_zero_address_and_port_resolve_to_source():
    bb = Backbone(rng=random.Random(2))
    ka(bb, A, T0)
    _with_history(bb)
    bb.flush(T0)
    request(bb, ("192.0.2.7", 4444), T0, 2, 4, addr="0.0.0.0", port=0)
    assert sends(bb.flush(T0)) == [(codec.encode(Forward("192.0.2.7", 4444, 2, 4)), A)]


def test_request_zero_address_with_explicit_port():
    bb = Backbone(rng=random.Random(2))
    ka(bb, A, T0)
    _with_history(bb)
    bb.flush(T0)
    request(bb, ("192.0.2.7", 4444), T0, 2, 4, addr="0.0.0.0", port=5555)
    assert sends(bb.flush(T0)) == [(codec.encode(Forward("192.0.2.7", 5555, 2, 4)), A)]


def test_request_naming_own_ip_with_other_port_is_accepted():
    bb = Backbone(rng=random.Random(2))
    ka(bb, A, T0)
    _with_history(bb)
    bb.flush(T0)
    request(bb, ("192.0.2.7", 4444), T0, 1, 10, addr="192.0.2.7", port=6666)
    assert sends(bb.flush(T0)) == [(codec.encode(Forward("192.0.2.7", 6666, 1, 10)), A)]


def test_keepalive_zero_address_with_explicit_port_registers_source_ip():
    bb = Backbone()
    ka(bb, A, T0, addr="0.0.0.0", port=9999)
    out = sends(bb.flush(T0))
    assert out == [(b"\x20" + bytes(16), A)]
    push(bb, PUB, T0, b"x")
    out = sends(bb.flush(T0))
    assert delivered_seqs(out, (A[0], 9999)) == [1]
    assert to(out, A) == []


def test_forward_range_starts_at_request_and_never_exceeds_it():
    bb = Backbone(rng=random.Random(2))
    ka(bb, A, T0)
    _with_history(bb, 10)
    bb.flush(T0)
    request(bb, B, T0, 4, 9)
    assert frames_to(sends(bb.flush(T0)), A) == [Forward(B[0], B[1], 4, 9)]
    request(bb, B, T0, 4, 1000)
    (fwd,) = frames_to(sends(bb.flush(T0)), A)
    assert fwd.from_seq == 4 and 4 <= fwd.to_seq <= 1000


def test_keepalive_ack_with_head_flag_carries_last_sequence():
    # codec extension FLAG_HEAD (0x8): the ACK also carries the last sequence issued
    bb = Backbone()
    ka(bb, A, T0, flags=codec.FLAG_HEAD, token=b"h" * 16)
    assert sends(bb.flush(T0)) == [(b"\x20" + b"h" * 16 + bytes(6), A)]
    push(bb, PUB, T0, b"a", b"b", b"c")
    bb.flush(T0)
    ka(bb, A, T0, flags=codec.FLAG_HEAD, token=b"h" * 16)
    ka(bb, B, T0, token=b"i" * 16)
    out = sends(bb.flush(T0))
    assert frames_to(out, A) == [KeepaliveAck(b"h" * 16, 3)]
    assert to(out, B) == [b"\x20" + b"i" * 16]


# ---------------------------------------------------------------- foreign addresses


def test_keepalive_naming_foreign_address_is_refused():
    bb = Backbone()
    ka(bb, A, T0, token=b"f" * 16, addr="203.0.113.5", port=80)
    assert sends(bb.flush(T0)) == []
    assert bb.counters["drop:foreign address"] == 1
    push(bb, PUB, T0, b"x")
    out = sends(bb.flush(T0))
    assert to(out, ("203.0.113.5", 80)) == []
    assert to(out, A) == []
    # the source did not become a client either
    assert out == []


def test_legacy_keepalive_naming_foreign_address_is_refused():
    bb = Backbone()
    bb.receive(codec.encode(Keepalive("203.0.113.5", 80, legacy=True)), A, T0)
    assert sends(bb.flush(T0)) == []
    assert bb.counters["drop:foreign address"] == 1


def test_request_naming_foreign_address_is_refused():
    bb = Backbone(rng=random.Random(2))
    ka(bb, B, T0)
    _with_history(bb)
    bb.flush(T0)
    request(bb, A, T0, 1, 5, addr="203.0.113.5", port=80)
    assert sends(bb.flush(T0)) == []
    assert bb.counters["drop:foreign address"] == 1


def test_trusted_network_may_name_other_addresses():
    trusted = (ipaddress.IPv4Network("10.0.0.0/24"),)
    bb = Backbone(trusted_networks=trusted, rng=random.Random(2))
    ka(bb, A, T0, token=b"t" * 16, addr="203.0.113.5", port=80)
    out = sends(bb.flush(T0))
    assert out == [(b"\x20" + b"t" * 16, A)]  # ACK to the source
    push(bb, PUB, T0, b"x")
    out = sends(bb.flush(T0))
    assert delivered_seqs(out, ("203.0.113.5", 80)) == [1]
    assert to(out, A) == []
    # a trusted REQUEST may name a third party too
    request(bb, A, T0, 1, 1, addr="198.51.100.1", port=81)
    assert sends(bb.flush(T0)) == [(codec.encode(Forward("198.51.100.1", 81, 1, 1)), ("203.0.113.5", 80))]
    assert bb.counters["drop:foreign address"] == 0


def test_trusted_networks_do_not_cover_other_sources():
    trusted = (ipaddress.IPv4Network("10.0.0.0/30"),)
    bb = Backbone(trusted_networks=trusted)
    ka(bb, ("10.0.0.4", 5000), T0, addr="203.0.113.5", port=80)
    ka(bb, ("192.168.5.5", 5000), T0, addr="10.0.0.1", port=80)
    assert sends(bb.flush(T0)) == []
    assert bb.counters["drop:foreign address"] == 2
    ka(bb, ("10.0.0.3", 5000), T0, addr="203.0.113.5", port=80)
    assert sends(bb.flush(T0)) == [(b"\x20" + bytes(16), ("10.0.0.3", 5000))]


# ---------------------------------------------------------------- bad input never raises


BAD_DATAGRAMS = [
    b"",
    b"\x00",
    b"\x03" + bytes(10),
    b"\xff" * 40,
    b"\x10" + bytes(10),  # KEEPALIVE of a wrong size
    b"\x10" + bytes(29),
    b"\x04" + bytes(18),  # REQUEST with zero sequence
    b"\x04" + bytes(5),
    b"\x04\x01\x02\x03\x04\x00\x05" + (9).to_bytes(6, "big") + (3).to_bytes(6, "big"),  # from > to
    b"\x02",
    b"\x02\x00\x05",
    b"\x02\x00\x05" + bytes(6),
    codec.encode_deliver(1, b"x"),  # unexpected types: only travel away from the backbone
    codec.encode(Forward("10.0.0.1", 5001, 1, 2)),
    codec.encode(KeepaliveAck(bytes(16))),
    codec.encode_confirm(1, 1),
    codec.encode_push(b"x") + bytes(65507),  # oversize
    bytes([0x02]) * 65508,
]


@pytest.mark.parametrize("datagram", BAD_DATAGRAMS, ids=range(len(BAD_DATAGRAMS)))
def test_bad_datagrams_are_counted_and_never_raise(datagram):
    bb = Backbone()
    ka(bb, A, T0)
    bb.flush(T0)
    bb.receive(datagram, B, T0)
    assert drops(bb) == 1
    assert sends(bb.flush(T0)) == []
    # the backbone keeps working
    push(bb, PUB, T0, b"ok")
    assert delivered_seqs(sends(bb.flush(T0)), A) == [1]


def test_specific_drop_reasons():
    bb = Backbone()
    bb.receive(b"", A, T0)
    bb.receive(b"\x03", A, T0)
    bb.receive(codec.encode_push(b"x") + bytes(65507), A, T0)
    bb.receive(codec.encode_deliver(1, b"x"), A, T0)
    assert bb.counters["drop:malformed"] == 2
    assert bb.counters["drop:oversize"] == 1
    assert bb.counters["drop:unexpected type"] == 1


# ---------------------------------------------------------------- sequence reservation


def test_first_flush_reserves_before_sending_the_first_sequence():
    bb = Backbone()
    assert bb.flush(T0).reserve is None
    push(bb, PUB, T0, b"x", tag=3)
    out = bb.flush(T0)
    assert out.reserve is not None and out.reserve >= 1
    assert sends(out) == [(codec.encode_confirm(3, 1), PUB)]


@pytest.mark.parametrize("block", [1, 3, 10])
def test_reserve_covers_every_sequence_sent(block):
    bb = Backbone(reserve_block=block)
    ka(bb, A, T0)
    ka(bb, B, T0, flags=codec.FLAG_BATCH)
    bb.flush(T0)
    persisted = 0
    issued = 0
    reserves = []
    rnd = random.Random(block)
    for step in range(60):
        count = rnd.randint(0, 4)
        if count:
            bb.receive(codec.pack([Push(b"p", step * 10 + j + 1) for j in range(count)]), PUB, T0)
            issued += count
        out = bb.flush(T0)
        if out.reserve is not None:
            assert out.reserve > persisted
            persisted = out.reserve
            reserves.append(persisted)
        seen = []
        for data, _ in sends(out):
            for f in codec.decode(data):
                if isinstance(f, (Deliver, Confirm)):
                    seen.append(f.seq)
        if seen:
            assert max(seen) <= persisted
            assert max(seen) == issued
        else:
            assert out.reserve is None
    assert persisted >= issued
    assert len(reserves) >= 1
    # a new block is only reserved when needed: at most one reservation per `block` sequences (+1)
    assert len(reserves) <= issued // block + 1


def test_reserve_is_none_when_no_new_block_is_needed():
    bb = Backbone(reserve_block=100)
    push(bb, PUB, T0, b"x")
    first = bb.flush(T0).reserve
    assert first is not None and first >= 1
    for _ in range(5):
        push(bb, PUB, T0, b"y")
        assert bb.flush(T0).reserve is None


@pytest.mark.parametrize("reserved", [0, 1, 41, 1 << 40])
def test_constructor_reserved_makes_first_sequence_next(reserved):
    bb = Backbone(reserved=reserved)
    ka(bb, A, T0)
    bb.flush(T0)
    push(bb, PUB, T0, b"a", b"b")
    out = bb.flush(T0)
    assert delivered_seqs(sends(out), A) == [reserved + 1, reserved + 2]
    assert out.reserve is not None and out.reserve >= reserved + 2


# ---------------------------------------------------------------- client capacity


def test_client_capacity_refuses_new_clients():
    bb = Backbone(client_capacity=2)
    ka(bb, A, T0)
    ka(bb, B, T0)
    ka(bb, C, T0, token=b"c" * 16)
    out = sends(bb.flush(T0))
    assert to(out, A) and to(out, B)
    assert to(out, C) == []
    assert drops(bb) == 1
    # known clients keep refreshing
    ka(bb, A, T0 + 1)
    assert to(sends(bb.flush(T0 + 1)), A) == [b"\x20" + bytes(16)]
    push(bb, PUB, T0 + 1, b"x")
    out = sends(bb.flush(T0 + 1))
    assert delivered_seqs(out, A) == [1]
    assert delivered_seqs(out, B) == [1]
    assert to(out, C) == []
    # once B expired there is room again
    ka(bb, A, T0 + 5.5)
    ka(bb, C, T0 + 5.5, token=b"c" * 16)
    out = sends(bb.flush(T0 + 5.5))
    assert to(out, C) == [b"\x20" + b"c" * 16]


# ---------------------------------------------------------------- fuzz


ADDR_CHOICES = st.one_of(
    st.just("0.0.0.0"),
    st.sampled_from(["10.0.0.2", "10.0.0.3", "10.0.0.1", "203.0.113.9"]),
    st.integers(0, 0xFFFFFFFF).map(lambda n: str(ipaddress.IPv4Address(n))),
)
U48 = (1 << 48) - 1
small_seq = st.integers(1, 40)


@st.composite
def random_frames(draw):
    kind = draw(st.sampled_from(["push", "push", "packed", "packed", "keepalive", "legacy", "request", "other"]))
    if kind == "push":
        return codec.encode_push(draw(st.binary(max_size=40)), draw(st.integers(0, 5)))
    if kind == "packed":
        n = draw(st.integers(1, 6))
        frames = [Push(draw(st.binary(max_size=30)), draw(st.integers(0, 5))) for _ in range(n)]
        data = codec.pack(frames)
        if draw(st.booleans()):
            data += draw(st.binary(max_size=12))
        return data
    if kind == "keepalive":
        return codec.encode(Keepalive(draw(ADDR_CHOICES), draw(st.integers(0, 0xFFFF)),
                                      draw(st.integers(0, 15)), draw(st.binary(min_size=16, max_size=16))))
    if kind == "legacy":
        return codec.encode(Keepalive(draw(ADDR_CHOICES), draw(st.integers(0, 0xFFFF)), legacy=True))
    if kind == "request":
        a, b = sorted((draw(small_seq), draw(small_seq)))
        return codec.encode(Request(draw(ADDR_CHOICES), draw(st.integers(0, 0xFFFF)), a, b))
    return codec.encode(draw(st.one_of(
        st.builds(Deliver, seq=st.integers(1, U48), data=st.binary(max_size=20)),
        st.builds(Confirm, tag=st.integers(1, U48), seq=st.integers(1, U48)),
        st.builds(KeepaliveAck, token=st.binary(min_size=16, max_size=16)),
        st.builds(Forward, addr=ADDR_CHOICES, port=st.integers(0, 0xFFFF), from_seq=st.just(1), to_seq=st.just(2)),
    )))


SOURCES = [("10.0.0.2", 6000), ("10.0.0.3", 6001), ("10.0.0.3", 6002), ("203.0.113.9", 1)]

operations = st.lists(
    st.tuples(
        st.sampled_from(["bytes", "frame", "frame", "flush"]),
        st.integers(0, len(SOURCES) - 1),
        st.binary(max_size=60),
        random_frames(),
        st.floats(min_value=0.0, max_value=0.7, allow_nan=False),
    ),
    min_size=1,
    max_size=40,
)


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(operations, st.integers(40, 400), st.integers(1, 50))
def test_fuzz_never_raises_and_batch_subscriber_sees_every_sequence_once_in_order(ops, batch_bytes, block):
    bb = Backbone(batch_bytes=batch_bytes, reserve_block=block, rng=random.Random(0))
    batch_sub = ("10.0.0.1", 7001)
    plain_sub = ("10.0.0.1", 7002)
    now = T0
    last_ka = None
    persisted = 0
    batch_seqs: list[int] = []
    plain_seqs: list[int] = []
    confirm_seqs: list[int] = []

    def refresh():
        nonlocal last_ka
        if last_ka is None or now - last_ka >= 1.0:
            ka(bb, batch_sub, now, flags=codec.FLAG_BATCH)
            ka(bb, plain_sub, now)
            last_ka = now

    def do_flush():
        nonlocal persisted
        out = bb.flush(now)
        if out.reserve is not None:
            persisted = max(persisted, out.reserve)
        for data, addr in sends(out):
            if addr == batch_sub:
                if data[0] == codec.DELIVER:
                    frames = codec.decode(data)  # raises if a frame were split
                    # within batch_bytes, unless one frame alone is larger than batch_bytes
                    assert len(data) <= batch_bytes or len(frames) == 1
                    batch_seqs.extend(f.seq for f in frames)
            elif addr == plain_sub:
                if data[0] == codec.DELIVER:
                    frames = codec.decode(data)
                    assert len(frames) == 1
                    plain_seqs.append(frames[0].seq)
            for f in codec.decode_lenient(data)[0]:
                if isinstance(f, KeepaliveAck) and f.head is not None:
                    assert f.head <= persisted or f.head == 0
                if isinstance(f, (Deliver, Confirm)):
                    assert f.seq <= persisted
                    if isinstance(f, Confirm):
                        confirm_seqs.append(f.seq)

    for kind, src, raw, frame, dt in ops:
        now += dt
        refresh()
        source = SOURCES[src]
        if kind == "bytes":
            bb.receive(raw, source, now)
        elif kind == "frame":
            bb.receive(frame, source, now)
        else:
            do_flush()
    refresh()
    do_flush()
    event(f"sequences delivered: {'none' if not batch_seqs else '1-9' if len(batch_seqs) < 10 else '10+'}")
    assert batch_seqs == list(range(1, len(batch_seqs) + 1))
    assert plain_seqs == batch_seqs
    assert all(1 <= s <= len(batch_seqs) for s in confirm_seqs)


# ---------------------------------------------------------------- last-resort re-delivery from the backbone's log


def redelivered(out_sends, addr):
    return [(f.seq, f.data) for f in frames_to(out_sends, addr, Deliver)]


def test_a_request_no_journaler_can_answer_is_redelivered_from_the_backbones_log():
    bb = Backbone(rng=random.Random(2))
    ka(bb, A, T0, flags=codec.FLAG_NOJOURNAL)
    _with_history(bb)
    bb.flush(T0)
    request(bb, A, T0 + 0.1, 3, 5)
    out = sends(bb.flush(T0 + 0.1))
    assert redelivered(out, A) == [(3, bytes([2])), (4, bytes([3])), (5, bytes([4]))]
    assert bb.counters["redelivery requests"] == 1 and bb.counters["redelivered"] == 3
    assert bb.counters["drop:no journaling client"] == 0


def test_a_repeated_request_is_forwarded_again_and_redelivered_by_the_backbone():
    bb = Backbone(rng=random.Random(2))
    ka(bb, A, T0)
    ka(bb, B, T0)
    _with_history(bb)
    bb.flush(T0)
    request(bb, A, T0 + 0.1, 2, 3)
    first = sends(bb.flush(T0 + 0.1))
    assert [dest for _, dest in first] == [B] and redelivered(first, A) == []  # the journaler's turn first
    request(bb, A, T0 + 0.5, 2, 3)  # asked again: B did not answer in time
    again = sends(bb.flush(T0 + 0.5))
    assert redelivered(again, A) == [(2, bytes([1])), (3, bytes([2]))]
    assert any(codec.decode(d) == [Forward(A[0], A[1], 2, 3)] for d, dest in again if dest == B)
    ka(bb, A, T0 + 4.9)
    ka(bb, B, T0 + 4.9)
    bb.flush(T0 + 4.9)
    request(bb, A, T0 + 5.0, 2, 3)  # long after: a new hole by the same name, the journaler's turn again
    assert redelivered(sends(bb.flush(T0 + 5.0)), A) == []


def test_redelivery_to_a_batch_client_resends_the_held_datagrams_as_sequenced_and_what_is_held_of_a_range():
    bb = Backbone(rng=random.Random(2), recent_bytes=40)  # room for about three one-frame datagrams
    ka(bb, A, T0, flags=codec.FLAG_NOJOURNAL | codec.FLAG_BATCH)
    originals = {}
    for i in range(6):
        push(bb, PUB, T0, bytes([i]))
        for data, dest in sends(bb.flush(T0)):
            if dest == A and data[0] == codec.DELIVER:
                originals[codec.decode(data)[0].seq] = data
    held = bb.recent.first
    assert held is not None and held > 1
    request(bb, A, T0 + 0.1, 1, 6)
    out = sends(bb.flush(T0 + 0.1))
    assert [seq for seq, _ in redelivered(out, A)] == list(range(held, 7))
    assert [d for d, dest in out if dest == A and d[0] == codec.DELIVER] == [originals[s] for s in range(held, 7)]


def test_redelivery_is_paced_per_requester_in_datagrams_and_resumes_where_it_stopped():
    bb = Backbone(rng=random.Random(2), redeliver_datagrams=1000.0)  # bursts of 32 datagrams, then 1000/s
    ka(bb, A, T0, flags=codec.FLAG_NOJOURNAL | codec.FLAG_BATCH)
    for i in range(100):
        push(bb, PUB, T0, *[bytes([i])] * 10)  # datagrams of ten frames
    bb.flush(T0)
    request(bb, A, T0 + 1, 1, 1000)
    first = [d for d, dest in sends(bb.flush(T0 + 1)) if dest == A]
    assert len(first) == 32 and codec.decode(first[-1])[-1].seq == 320
    assert bb.pending() and bb.next_deadline(T0 + 1) == pytest.approx(T0 + 1.001)
    later = [d for d, dest in sends(bb.flush(T0 + 1.0205)) if dest == A]
    assert len(later) == 20 and codec.decode(later[0])[0].seq == 321  # 20 ms at 1000/s
    rest = [d for d, dest in sends(bb.flush(T0 + 2)) if dest == A]
    assert len(rest) == 32  # a long pause gives no more than a burst
    now = T0 + 2
    for _ in range(100):
        now += 0.01
        rest += [d for d, dest in sends(bb.flush(now)) if dest == A]
    seqs = [f.seq for d in first + later + rest for f in codec.decode(d)]
    assert seqs == list(range(1, 1001)) and not bb.pending() and bb.next_deadline(now) is None


def test_a_request_beyond_what_the_log_holds_with_no_journaler_is_dropped():
    bb = Backbone(rng=random.Random(2), recent_bytes=0)
    ka(bb, A, T0, flags=codec.FLAG_NOJOURNAL)
    _with_history(bb)
    bb.flush(T0)
    request(bb, A, T0 + 0.1, 1, 2)
    assert sends(bb.flush(T0 + 0.1)) == []
    assert bb.counters["drop:no journaling client"] == 1
