"""Tests of the wire codec (fyrehose.protocol.codec) against docs/protocol.md: the base protocol and its extensions.

The layout checks build the expected bytes by hand from the layouts in docs/protocol.md, so
that the codec is checked against the spec rather than against itself.
"""
from __future__ import annotations

import ipaddress

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fyrehose.protocol import codec
from fyrehose.protocol.codec import (
    Confirm,
    Deliver,
    Forward,
    Keepalive,
    KeepaliveAck,
    ProtocolError,
    Push,
    Request,
)

FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
MEDIUM = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

U48 = (1 << 48) - 1

# ---------------------------------------------------------------- strategies

seqs = st.integers(min_value=1, max_value=U48)
tags = st.integers(min_value=0, max_value=U48)
nonzero_tags = st.integers(min_value=1, max_value=U48)
ports = st.integers(min_value=0, max_value=0xFFFF)
addrs = st.integers(min_value=0, max_value=0xFFFFFFFF).map(lambda n: str(ipaddress.IPv4Address(n)))
payloads = st.binary(max_size=300)
tokens = st.binary(min_size=16, max_size=16)
flags = st.integers(min_value=0, max_value=U48)


@st.composite
def ranges(draw):
    a = draw(seqs)
    b = draw(seqs)
    return min(a, b), max(a, b)


delivers = st.builds(Deliver, seq=seqs, data=payloads)
pushes_untagged = st.builds(Push, data=payloads)
pushes_tagged = st.builds(Push, data=payloads, tag=nonzero_tags)
pushes = st.builds(Push, data=payloads, tag=tags)
confirms = st.builds(Confirm, tag=nonzero_tags, seq=seqs)


@st.composite
def requests(draw):
    lo, hi = draw(ranges())
    return Request(draw(addrs), draw(ports), lo, hi)


@st.composite
def forwards(draw):
    lo, hi = draw(ranges())
    return Forward(draw(addrs), draw(ports), lo, hi)


keepalives = st.builds(Keepalive, addr=addrs, port=ports, flags=flags, token=tokens)
legacy_keepalives = st.builds(Keepalive, addr=addrs, port=ports, legacy=st.just(True))
acks = st.builds(KeepaliveAck, token=tokens)
# FLAG_HEAD extension of the codec: the ACK may carry the last sequence issued (0 = none yet)
acks_with_head = st.builds(KeepaliveAck, token=tokens, head=st.integers(min_value=0, max_value=U48))

packable = st.one_of(delivers, pushes, confirms)
single_frames = st.one_of(requests(), forwards(), keepalives, legacy_keepalives, acks, acks_with_head)
any_frame = st.one_of(packable, single_frames)


def u48(n: int) -> bytes:
    return n.to_bytes(6, "big")


def ip(text: str) -> bytes:
    return ipaddress.IPv4Address(text).packed


# ---------------------------------------------------------------- round trips


@FAST
@given(delivers)
def test_deliver_round_trip(frame):
    data = codec.encode(frame)
    assert len(data) == 9 + len(frame.data)
    assert codec.decode(data) == [frame]


@FAST
@given(pushes_untagged)
def test_push_without_tag_round_trip(frame):
    data = codec.encode(frame)
    assert data[3:9] == bytes(6)  # base protocol (docs/protocol.md, PUSH): the unused bytes stay zero
    assert codec.decode(data) == [frame]
    assert codec.decode(data)[0].tag == 0


@FAST
@given(pushes_tagged)
def test_push_with_tag_round_trip(frame):
    data = codec.encode(frame)
    assert data[3:9] == u48(frame.tag)
    assert codec.decode(data) == [frame]


@FAST
@given(requests())
def test_request_round_trip(frame):
    data = codec.encode(frame)
    assert len(data) == 19
    assert codec.decode(data) == [frame]


@FAST
@given(forwards())
def test_forward_round_trip(frame):
    data = codec.encode(frame)
    assert len(data) == 19
    assert codec.decode(data) == [frame]


@FAST
@given(keepalives)
def test_keepalive_round_trip(frame):
    data = codec.encode(frame)
    assert len(data) == 29
    assert codec.decode(data) == [frame]


@FAST
@given(legacy_keepalives)
def test_legacy_keepalive_round_trip(frame):
    data = codec.encode(frame)
    assert len(data) == 7
    (decoded,) = codec.decode(data)
    assert decoded == frame
    assert decoded.legacy is True
    assert decoded.flags == 0
    assert decoded.token == bytes(16)


@FAST
@given(acks)
def test_keepalive_ack_round_trip(frame):
    data = codec.encode(frame)
    assert len(data) == 17
    assert codec.decode(data) == [frame]


@FAST
@given(acks_with_head)
def test_keepalive_ack_with_head_round_trip(frame):
    data = codec.encode(frame)
    assert data == b"\x20" + frame.token + u48(frame.head)
    assert codec.decode(data) == [frame]


@FAST
@given(confirms)
def test_confirm_round_trip(frame):
    data = codec.encode(frame)
    assert len(data) == 13
    assert codec.decode(data) == [frame]


@FAST
@given(any_frame)
def test_every_frame_round_trips_and_reencodes_identically(frame):
    data = codec.encode(frame)
    decoded = codec.decode(data)
    assert decoded == [frame]
    assert codec.encode(decoded[0]) == data
    assert codec.decode_lenient(data) == ([frame], None)


@FAST
@given(st.lists(packable, min_size=1, max_size=12))
def test_pack_round_trip(frames):
    datagram = codec.pack(frames)
    assert datagram == b"".join(codec.encode(f) for f in frames)
    assert codec.decode(datagram) == frames
    assert codec.decode_lenient(datagram) == (frames, None)


@FAST
@given(st.lists(st.one_of(pushes_untagged, pushes_tagged), min_size=1, max_size=12))
def test_packed_push_round_trip(frames):
    datagram = codec.pack(frames)
    assert codec.decode(datagram) == frames


@FAST
@given(st.lists(delivers, min_size=1, max_size=12))
def test_packed_deliver_round_trip(frames):
    datagram = codec.pack(frames)
    assert codec.decode(datagram) == frames


@FAST
@given(st.lists(confirms, min_size=1, max_size=12))
def test_packed_confirm_round_trip(frames):
    datagram = codec.pack(frames)
    assert len(datagram) == 13 * len(frames)
    assert codec.decode(datagram) == frames


@FAST
@given(st.lists(single_frames, min_size=1, max_size=3), st.lists(packable, max_size=3))
def test_pack_refuses_frames_that_must_stand_alone(alone, others):
    with pytest.raises(ProtocolError) as info:
        codec.pack(others + alone)
    assert info.value.reason


def test_pack_refuses_empty_list():
    with pytest.raises(ProtocolError) as info:
        codec.pack([])
    assert info.value.reason


# ---------------------------------------------------------------- byte-exact layouts (by hand from docs/protocol.md)


def test_legacy_keepalive_bytes_match_seed_001_example():
    # docs/protocol.md, "Legacy KEEPALIVE": 127.0.0.1:2323 -> 0x10 | 7f 00 00 01 | 09 13
    expected = bytes([0x10, 0x7F, 0x00, 0x00, 0x01, 0x09, 0x13])
    assert codec.encode(Keepalive("127.0.0.1", 2323, legacy=True)) == expected
    assert codec.decode(expected) == [Keepalive("127.0.0.1", 2323, 0, bytes(16), legacy=True)]


def test_deliver_layout():
    # 0x1 | LENGTH (2) | SEQUENCE (6) | DATA
    frame = Deliver(0x0102030405FF, b"hello")
    expected = b"\x01" + b"\x00\x05" + b"\x01\x02\x03\x04\x05\xff" + b"hello"
    assert codec.encode(frame) == expected
    assert codec.decode(expected) == [frame]


def test_deliver_layout_empty_payload_and_max_sequence():
    expected = b"\x01\x00\x00" + b"\xff" * 6
    assert codec.encode(Deliver(U48, b"")) == expected
    assert codec.decode(expected) == [Deliver(U48, b"")]


def test_push_layout_untagged():
    # docs/protocol.md, "PUSH (0x02)": 0x2 | LENGTH (2) | UNUSED (6) | DATA
    expected = b"\x02\x00\x03" + bytes(6) + b"abc"
    assert codec.encode(Push(b"abc")) == expected
    assert codec.decode(expected) == [Push(b"abc", 0)]


def test_push_layout_tagged():
    # docs/protocol.md, "CONFIRM and tagged PUSH": the tag lives in the 6 unused bytes
    expected = b"\x02\x01\x00" + b"\x00\x00\x00\x00\x01\x02" + b"z" * 256
    assert codec.encode(Push(b"z" * 256, tag=0x102)) == expected
    assert codec.decode(expected) == [Push(b"z" * 256, 0x102)]


def test_request_layout():
    # 0x4 | ADDR (4) | PORT (2) | FROM_SEQ (6) | TO_SEQ (6)
    expected = b"\x04" + b"\x7f\x00\x00\x01" + b"\x09\x13" + u48(1) + u48(0x10000000002)
    frame = Request("127.0.0.1", 2323, 1, 0x10000000002)
    assert codec.encode(frame) == expected
    assert codec.decode(expected) == [frame]


def test_forward_layout():
    expected = b"\x08" + b"\x0a\x01\x02\x03" + b"\xff\xfe" + u48(7) + u48(9)
    frame = Forward("10.1.2.3", 0xFFFE, 7, 9)
    assert codec.encode(frame) == expected
    assert codec.decode(expected) == [frame]


def test_keepalive_layout():
    # 0x10 | ADDR (4) | PORT (2) | FLAGS (6) | TOKEN (16)
    token = bytes(range(16))
    expected = b"\x10" + b"\xc0\xa8\x01\x02" + b"\x1f\x90" + b"\x00\x00\x00\x00\x00\x07" + token
    frame = Keepalive("192.168.1.2", 8080, codec.FLAG_NOSUBSCRIBE | codec.FLAG_NOJOURNAL | codec.FLAG_BATCH, token)
    assert codec.encode(frame) == expected
    assert codec.decode(expected) == [frame]


def test_keepalive_default_is_source_placeholder():
    expected = b"\x10" + bytes(4) + bytes(2) + bytes(6) + bytes(16)
    assert codec.encode(Keepalive()) == expected


def test_keepalive_ack_layout():
    token = b"0123456789abcdef"
    expected = b"\x20" + token
    assert codec.encode(KeepaliveAck(token)) == expected
    assert codec.decode(expected) == [KeepaliveAck(token)]


def test_confirm_layout():
    # docs/protocol.md, "CONFIRM (0x40)": 0x40 CONFIRM | TAG (6) | SEQUENCE (6)
    expected = b"\x40" + u48(0xABCDEF) + u48(0x123456789A)
    assert codec.encode(Confirm(0xABCDEF, 0x123456789A)) == expected
    assert codec.decode(expected) == [Confirm(0xABCDEF, 0x123456789A)]


def test_frame_type_constants_and_flags():
    assert (codec.DELIVER, codec.PUSH, codec.REQUEST, codec.FORWARD) == (0x1, 0x2, 0x4, 0x8)
    assert (codec.KEEPALIVE, codec.KEEPALIVE_ACK, codec.CONFIRM) == (0x10, 0x20, 0x40)
    assert (codec.FLAG_NOSUBSCRIBE, codec.FLAG_NOJOURNAL, codec.FLAG_BATCH) == (0x1, 0x2, 0x4)


def test_packed_layout_is_plain_concatenation():
    frames = [Deliver(1, b"a"), Deliver(2, b""), Confirm(5, 6), Push(b"xy", 3)]
    expected = (
        b"\x01\x00\x01" + u48(1) + b"a"
        + b"\x01\x00\x00" + u48(2)
        + b"\x40" + u48(5) + u48(6)
        + b"\x02\x00\x02" + u48(3) + b"xy"
    )
    assert codec.pack(frames) == expected
    assert codec.decode(expected) == frames


# ---------------------------------------------------------------- maximum payload


def test_max_payload_constant():
    assert codec.MAX_PAYLOAD == 65498 == 65507 - 9
    assert codec.MAX_DATAGRAM == 65507


@pytest.mark.parametrize("make", [lambda d: Deliver(1, d), lambda d: Push(d), lambda d: Push(d, 9)])
def test_max_payload_is_accepted(make):
    data = bytes(range(256)) * 255 + bytes(65498 - 256 * 255)
    assert len(data) == 65498
    encoded = codec.encode(make(data))
    assert len(encoded) == 65507
    assert codec.decode(encoded) == [make(data)]


@pytest.mark.parametrize("make", [lambda d: Deliver(1, d), lambda d: Push(d), lambda d: Push(d, 9)])
def test_payload_over_max_raises_payload_too_large(make):
    with pytest.raises(codec.PayloadTooLarge) as info:
        codec.encode(make(bytes(65499)))
    assert isinstance(info.value, ProtocolError)
    assert info.value.reason
    assert info.value.size == 65499


def test_encode_push_and_deliver_helpers_enforce_max_payload():
    assert len(codec.encode_push(bytes(65498))) == 65507
    assert len(codec.encode_deliver(3, bytes(65498))) == 65507
    with pytest.raises(codec.PayloadTooLarge):
        codec.encode_push(bytes(65499))
    with pytest.raises(codec.PayloadTooLarge):
        codec.encode_deliver(3, bytes(65499))


def test_pack_refuses_more_than_one_datagram():
    with pytest.raises(ProtocolError) as info:
        codec.pack([Push(bytes(40000)), Push(bytes(40000))])
    assert info.value.reason


# ---------------------------------------------------------------- encode-side validation


@pytest.mark.parametrize(
    "frame",
    [
        Deliver(0, b"x"),
        Deliver(1 << 48, b"x"),
        Push(b"x", -1),
        Push(b"x", 1 << 48),
        Confirm(0, 1),
        Confirm(1, 0),
        Request("1.2.3.4", 1, 0, 5),
        Request("1.2.3.4", 1, 6, 5),
        Forward("1.2.3.4", 1, 6, 5),
        Request("1.2.3.4", 70000, 1, 5),
        Request("not-an-ip", 1, 1, 5),
        Keepalive("1.2.3.4", 1, 0, b"short"),
        Keepalive("1.2.3.4", 1, 1 << 48),
        Keepalive("1.2.3.4", 1, 1, legacy=True),
        Keepalive("::1", 1),
        KeepaliveAck(b"short"),
    ],
)
def test_encode_rejects_invalid_frames(frame):
    with pytest.raises(ProtocolError) as info:
        codec.encode(frame)
    assert info.value.reason


# ---------------------------------------------------------------- decoding garbage


@MEDIUM
@given(st.binary(max_size=200))
def test_decode_random_bytes_only_raises_protocol_error(data):
    try:
        frames = codec.decode(data)
    except ProtocolError as exc:
        assert isinstance(exc.reason, str) and exc.reason
    else:
        assert frames
        assert all(isinstance(f, (Deliver, Push, Request, Forward, Keepalive, KeepaliveAck, Confirm)) for f in frames)


@MEDIUM
@given(st.sampled_from([0x01, 0x02, 0x04, 0x08, 0x10, 0x20, 0x40]), st.binary(max_size=60))
def test_decode_random_bodies_of_known_types_only_raise_protocol_error(kind, body):
    data = bytes([kind]) + body
    try:
        frames = codec.decode(data)
    except ProtocolError as exc:
        assert exc.reason
        frames_l, err = codec.decode_lenient(data)
        assert err is not None and err.reason
    else:
        # whatever decodes must re-encode to exactly the same bytes
        if len(frames) == 1 and not isinstance(frames[0], (Deliver, Push, Confirm)):
            assert codec.encode(frames[0]) == data
        else:
            assert codec.pack(frames) == data


@MEDIUM
@given(st.binary(max_size=200))
def test_decode_lenient_random_bytes_never_raises(data):
    frames, error = codec.decode_lenient(data)
    assert error is None or isinstance(error, ProtocolError)
    if error is None:
        assert codec.decode(data) == frames
    else:
        assert error.reason
        with pytest.raises(ProtocolError):
            codec.decode(data)


@MEDIUM
@given(st.binary(max_size=200), st.sampled_from([codec.PUSH, codec.DELIVER]))
def test_scan_random_bytes_never_raises(data, kind):
    spans, error = codec.scan(data, kind)
    assert error is None or isinstance(error, str)
    pos = 0
    for start, end, _value in spans:
        assert start == pos and start < end <= len(data)
        pos = end
    if error is None:
        assert pos == len(data) and data


def test_decode_empty_datagram():
    with pytest.raises(ProtocolError) as info:
        codec.decode(b"")
    assert info.value.reason
    frames, error = codec.decode_lenient(b"")
    assert frames == [] and error is not None and error.reason


def test_unknown_types_raise_protocol_error():
    unknown = [k for k in range(256) if k not in (0x01, 0x02, 0x04, 0x08, 0x10, 0x20, 0x40)]
    assert len(unknown) == 249
    for kind in unknown:
        for body in (b"", bytes(6), bytes(8), bytes(12), bytes(16), bytes(18), bytes(28)):
            with pytest.raises(ProtocolError) as info:
                codec.decode(bytes([kind]) + body)
            assert info.value.reason == "unknown type"


def _single_datagrams():
    return st.one_of(
        delivers, pushes, confirms, requests(), forwards(), keepalives, legacy_keepalives, acks, acks_with_head
    )


@FAST
@given(_single_datagrams())
def test_every_truncation_of_a_single_frame_raises(frame):
    data = codec.encode(frame)
    for cut in range(len(data)):
        prefix = data[:cut]
        if cut == 7 and isinstance(frame, Keepalive) and not frame.legacy:
            # the first 7 bytes of a KEEPALIVE are a valid legacy KEEPALIVE (docs/protocol.md)
            assert codec.decode(prefix) == [Keepalive(frame.addr, frame.port, legacy=True)]
            continue
        if cut == 17 and isinstance(frame, KeepaliveAck) and frame.head is not None:
            # the first 17 bytes of an ACK with head are a plain ACK
            assert codec.decode(prefix) == [KeepaliveAck(frame.token)]
            continue
        with pytest.raises(ProtocolError) as info:
            codec.decode(prefix)
        assert info.value.reason
        frames, error = codec.decode_lenient(prefix)
        assert frames == [] and error is not None and error.reason


@FAST
@given(st.lists(packable, min_size=1, max_size=6))
def test_every_truncation_of_a_packed_datagram(frames):
    encoded = [codec.encode(f) for f in frames]
    data = b"".join(encoded)
    boundaries = {0}
    pos = 0
    for e in encoded:
        pos += len(e)
        boundaries.add(pos)
    for cut in range(len(data)):
        prefix = data[:cut]
        complete = sum(1 for b in boundaries if 0 < b <= cut)
        if cut in boundaries and cut:
            assert codec.decode(prefix) == frames[:complete]
            continue
        with pytest.raises(ProtocolError) as info:
            codec.decode(prefix)
        assert info.value.reason
        got, error = codec.decode_lenient(prefix)
        assert got == frames[:complete]
        assert error is not None and error.reason


@pytest.mark.parametrize(
    "frame, bad_sizes",
    [
        (Request("1.2.3.4", 5, 1, 2), (18, 20, 40)),
        (Forward("1.2.3.4", 5, 1, 2), (18, 20, 40)),
        (Keepalive("1.2.3.4", 5, 0, bytes(16)), (6, 8, 28, 30, 60)),
        (KeepaliveAck(bytes(16)), (1, 16, 18, 22, 24, 40)),
    ],
)
def test_wrong_sizes_raise(frame, bad_sizes):
    data = codec.encode(frame)
    for size in bad_sizes:
        wrong = (data + bytes(size))[:size]
        assert len(wrong) == size
        with pytest.raises(ProtocolError) as info:
            codec.decode(wrong)
        assert info.value.reason


def test_trailing_garbage_after_packed_frames():
    good = codec.pack([Deliver(1, b"a"), Deliver(2, b"b")])
    for tail in (b"\x01", b"\x01\x00", b"\x01\x00\x05" + u48(3) + b"ab", b"\x99", b"\x10" + bytes(28)):
        with pytest.raises(ProtocolError):
            codec.decode(good + tail)
        frames, error = codec.decode_lenient(good + tail)
        assert frames == [Deliver(1, b"a"), Deliver(2, b"b")]
        assert error is not None and error.reason


def test_zero_sequence_deliver_raises():
    with pytest.raises(ProtocolError) as info:
        codec.decode(b"\x01\x00\x01" + u48(0) + b"x")
    assert info.value.reason


@pytest.mark.parametrize("tag, seq", [(0, 1), (1, 0), (0, 0)])
def test_zero_confirm_fields_raise(tag, seq):
    with pytest.raises(ProtocolError) as info:
        codec.decode(b"\x40" + u48(tag) + u48(seq))
    assert info.value.reason


@pytest.mark.parametrize("kind", [0x04, 0x08])
@pytest.mark.parametrize("lo, hi", [(0, 5), (0, 0), (6, 5), (U48, 1)])
def test_bad_ranges_raise(kind, lo, hi):
    data = bytes([kind]) + ip("1.2.3.4") + b"\x00\x05" + u48(lo) + u48(hi)
    with pytest.raises(ProtocolError) as info:
        codec.decode(data)
    assert info.value.reason
    frames, error = codec.decode_lenient(data)
    assert frames == [] and error is not None


@pytest.mark.parametrize("kind", [0x04, 0x08, 0x10, 0x20])
def test_single_frames_inside_packed_datagram_stop_decoding(kind):
    first = codec.encode(Push(b"ok", 1))
    inner = {
        0x04: codec.encode(Request("1.2.3.4", 5, 1, 2)),
        0x08: codec.encode(Forward("1.2.3.4", 5, 1, 2)),
        0x10: codec.encode(Keepalive()),
        0x20: codec.encode(KeepaliveAck(bytes(16))),
    }[kind]
    with pytest.raises(ProtocolError) as info:
        codec.decode(first + inner)
    assert info.value.reason
    frames, error = codec.decode_lenient(first + inner)
    assert frames == [Push(b"ok", 1)]
    assert error is not None and error.reason


# ---------------------------------------------------------------- decode_lenient


@FAST
@given(st.lists(packable, min_size=0, max_size=6), st.binary(min_size=1, max_size=30))
def test_decode_lenient_returns_well_formed_prefix(frames, garbage):
    # make the garbage certainly malformed: an unknown type byte first
    bad = b"\x03" + garbage
    data = b"".join(codec.encode(f) for f in frames) + bad
    got, error = codec.decode_lenient(data)
    if frames:
        assert got == frames
    else:
        assert got == []
    assert error is not None and error.reason


def test_decode_lenient_valid_single_frame():
    frame = Keepalive("1.2.3.4", 5, 3, bytes(range(16)))
    assert codec.decode_lenient(codec.encode(frame)) == ([frame], None)


# ---------------------------------------------------------------- scan


@FAST
@given(st.lists(pushes, min_size=1, max_size=10))
def test_scan_returns_spans_for_packed_push(frames):
    encoded = [codec.encode(f) for f in frames]
    data = b"".join(encoded)
    spans, error = codec.scan(data, codec.PUSH)
    assert error is None
    assert len(spans) == len(frames)
    pos = 0
    for (start, end, value), frame, enc in zip(spans, frames, encoded):
        assert (start, end) == (pos, pos + len(enc))
        assert data[start:end] == enc
        assert value == frame.tag
        pos = end


@FAST
@given(st.lists(delivers, min_size=1, max_size=10))
def test_scan_returns_spans_for_packed_deliver(frames):
    data = codec.pack(frames)
    spans, error = codec.scan(data, codec.DELIVER)
    assert error is None
    assert [v for _, _, v in spans] == [f.seq for f in frames]
    assert [codec.decode(data[s:e])[0] for s, e, _ in spans] == frames


@FAST
@given(
    st.lists(pushes, min_size=0, max_size=6),
    st.sampled_from(["truncated-header", "truncated-body", "deliver", "unknown", "keepalive"]),
    st.lists(pushes, min_size=0, max_size=3),
)
def test_scan_stops_at_first_malformed_frame(frames, kind, after):
    good = b"".join(codec.encode(f) for f in frames)
    bad = {
        "truncated-header": b"\x02\x00\x05",
        "truncated-body": b"\x02\x00\x05" + bytes(6) + b"ab",
        "deliver": codec.encode(Deliver(1, b"x")),
        "unknown": b"\x77" + bytes(12),
        "keepalive": codec.encode(Keepalive()),
    }[kind]
    tail = b"".join(codec.encode(f) for f in after)
    if kind.startswith("truncated"):
        tail = b""  # a truncated frame is necessarily last
    spans, error = codec.scan(good + bad + tail, codec.PUSH)
    assert error is not None and isinstance(error, str)
    assert len(spans) == len(frames)
    assert [v for _, _, v in spans] == [f.tag for f in frames]
    if spans:
        assert spans[-1][1] == len(good)


def test_scan_empty():
    spans, error = codec.scan(b"", codec.PUSH)
    assert spans == [] and error


def test_scan_accepts_memoryview_and_bytearray():
    data = codec.pack([Push(b"a", 1), Push(b"bc", 2)])
    for buf in (bytearray(data), memoryview(data)):
        spans, error = codec.scan(buf, codec.PUSH)
        assert error is None
        assert spans == [(0, 10, 1), (10, 21, 2)]


# ---------------------------------------------------------------- pack_greedy


@MEDIUM
@given(
    st.lists(st.one_of(delivers, pushes, confirms), min_size=0, max_size=25),
    st.integers(min_value=320, max_value=2000),
)
def test_pack_greedy_respects_limit_and_never_splits(frames, limit):
    encoded = [codec.encode(f) for f in frames]
    assert all(len(e) <= limit for e in encoded)
    datagrams = codec.pack_greedy(encoded, limit)
    # nothing lost, nothing reordered
    assert b"".join(datagrams) == b"".join(encoded)
    if not encoded:
        assert datagrams == []
        return
    for d in datagrams:
        assert 0 < len(d) <= limit
    # every datagram boundary is a frame boundary: each datagram decodes on its own
    decoded = []
    for d in datagrams:
        decoded.extend(codec.decode(d))
    assert decoded == frames
    # greedy: the next datagram's first frame would not have fit in the previous one
    i = 0
    firsts = []
    for d in datagrams:
        firsts.append(i)
        size = 0
        while size < len(d):
            size += len(encoded[i])
            i += 1
        assert size == len(d)
    for k in range(1, len(datagrams)):
        assert len(datagrams[k - 1]) + len(encoded[firsts[k]]) > limit


def test_pack_greedy_default_limit_is_one_datagram():
    encoded = [codec.encode(Push(bytes(30000))) for _ in range(5)]
    datagrams = codec.pack_greedy(encoded)
    assert [len(d) for d in datagrams] == [60018, 60018, 30009]
    assert all(len(d) <= codec.MAX_DATAGRAM for d in datagrams)


def test_pack_greedy_exact_fit():
    encoded = [codec.encode(Confirm(1, i)) for i in range(1, 7)]  # 13 bytes each
    assert [len(d) for d in codec.pack_greedy(encoded, 26)] == [26, 26, 26]
    assert [len(d) for d in codec.pack_greedy(encoded, 25)] == [13] * 6
    assert [len(d) for d in codec.pack_greedy(encoded, 39)] == [39, 39]


@pytest.mark.parametrize("kind", [codec.DELIVER, codec.PUSH])
def test_frame_length_beyond_the_max_payload_is_refused_even_if_present(kind):
    too_long = bytes([kind]) + (65499).to_bytes(2, "big") + (1).to_bytes(6, "big") + bytes(65499)
    with pytest.raises(codec.PayloadTooLarge):
        codec.decode(too_long)
    spans, error = codec.scan(too_long, kind)
    assert spans == [] and error == "oversize"


# ---------------------------------------------------------------- columns of consecutive numbers


@MEDIUM
@given(st.one_of(st.integers(0, U48), st.integers(0, 8).map(lambda k: k * 65536 - 3)).filter(lambda n: n >= 0),
       st.one_of(st.integers(1, 1200), st.sampled_from([65535, 65536, 65537, 140000])))
def test_consecutive_columns_are_the_numbers_bytes_one_by_one(first, count):
    """Around the low 16 bits' wrap (where the top bytes change) and past the table's cycles too."""
    first = min(first, U48 - count + 1)
    raw = b"".join((first + i).to_bytes(6, "big") for i in range(count))
    assert codec.consecutive_u48_columns(first, count) == [raw[k::6] for k in range(6)]


@MEDIUM
@given(st.integers(1, U48), st.integers(1, 300), st.integers(0, 8), st.integers(0, 30), st.data())
def test_a_column_reads_as_consecutive_exactly_when_it_counts_up_by_one(first, count, offset, spare, data):
    first = min(first, U48 - count + 1)
    step = offset + 6 + spare
    buf = bytearray(data.draw(st.binary(min_size=step * count, max_size=step * count)))
    codec.put_consecutive_u48(buf, offset, step, first, count)
    assert list(codec.u48_column(buf, offset, step, count)) == list(range(first, first + count))
    assert codec.consecutive_u48(buf, offset, step, count) == first
    record, byte = data.draw(st.integers(0, count - 1)), data.draw(st.integers(0, 5))
    buf[record * step + offset + byte] ^= data.draw(st.integers(1, 255))
    changed = list(codec.u48_column(buf, offset, step, count))
    counts_up = changed[0] and changed == list(range(changed[0], changed[0] + count))
    assert codec.consecutive_u48(buf, offset, step, count) == (changed[0] if counts_up else 0)


@FAST
@given(st.lists(confirms, min_size=1, max_size=40))
def test_confirm_runs_hold_exactly_the_confirmed_pairs(frames):
    datagram = codec.pack(frames)
    runs = codec.decode_confirm_runs(datagram)
    assert [(tag + i, seq + i) for tag, count, seq in runs for i in range(count)] == codec.decode_confirms(datagram)


def test_a_batch_confirmed_in_one_datagram_is_one_run():
    datagram = codec.pack([Confirm(tag, 1000 + tag) for tag in range(7, 507)])
    assert codec.decode_confirm_runs(datagram) == [(7, 500, 1007)]
    with pytest.raises(ProtocolError):
        codec.decode_confirm_runs(datagram + b"\x01")
