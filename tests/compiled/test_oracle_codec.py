"""The compiled frame codec answers every input as its .py does (tests/oracle.py)."""
from __future__ import annotations

from array import array

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oracle import same, twins

NAME = "fyrehose.protocol.codec"
EXAMPLES = settings(max_examples=400, deadline=None)


@pytest.fixture(scope="module")
def builds():
    return twins(NAME)


def _seeds(module) -> list[bytes]:
    """Valid datagrams of every kind, to damage."""
    return [
        b"".join(module.encode_deliver(seq, b"x" * (seq % 7)) for seq in range(5, 12)),
        b"".join(module.encode_push(b"p" * 3, tag) for tag in range(1, 6)),
        b"".join(module.encode_push(b"", 0) for _ in range(4)),
        b"".join(module.encode_confirm(tag, tag + 100) for tag in range(1, 20)),
        module.encode(module.Request("10.0.0.1", 5, 1, 9)),
        module.encode(module.Forward("10.0.0.2", 6, 3, 3)),
        module.encode(module.Keepalive("0.0.0.0", 0, module.FLAG_BATCH, b"t" * 16)),
        module.encode(module.Keepalive(legacy=True)),
        module.encode(module.KeepaliveAck(b"k" * 16)),
        module.encode(module.KeepaliveAck(b"k" * 16, 77)),
    ]


@st.composite
def datagrams(draw, module):
    """Random bytes, or a valid datagram cut, with one byte changed, as bytes, bytearray or memoryview."""
    base = draw(st.one_of(st.binary(max_size=120), st.sampled_from(_seeds(module))))
    cut = draw(st.integers(0, len(base)))
    data = bytearray(base[:cut] if draw(st.booleans()) else base)
    if data and draw(st.booleans()):
        data[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0, 255))
    return draw(st.sampled_from([bytes, bytearray, memoryview]))(bytes(data))


frame_types = st.one_of(st.sampled_from([0x01, 0x02, 0x40]), st.integers(0, 255))


@EXAMPLES
@given(data=st.data())
def test_decoding_agrees(builds, data):
    built, source = builds
    datagram = bytes(data.draw(datagrams(source)))
    same(lambda: built.decode(datagram), lambda: source.decode(datagram))
    same(lambda: built.decode_lenient(datagram), lambda: source.decode_lenient(datagram))
    same(lambda: built.decode_confirms(datagram), lambda: source.decode_confirms(datagram))
    same(lambda: built.decode_confirm_runs(datagram), lambda: source.decode_confirm_runs(datagram))


@EXAMPLES
@given(data=st.data(), frame_type=frame_types)
def test_scanning_agrees(builds, data, frame_type):
    built, source = builds
    datagram = data.draw(datagrams(source))
    spans = same(lambda: built.scan(datagram, frame_type), lambda: source.scan(datagram, frame_type))
    same(lambda: built.uniform_step(datagram, frame_type), lambda: source.uniform_step(datagram, frame_type))
    found = source.scan(datagram, frame_type)[0]
    assert spans[0] == "tuple"
    same(lambda: built.consecutive_first(found), lambda: source.consecutive_first(found))


u48 = st.one_of(st.integers(0, (1 << 48) - 1), st.integers(-5, 5), st.integers((1 << 48) - 5, (1 << 48) + 5))


@EXAMPLES
@given(seq=u48, tag=u48, payload=st.binary(max_size=64), big=st.booleans())
def test_encoding_frames_agrees(builds, seq, tag, payload, big):
    built, source = builds
    data = b"z" * 65499 if big else payload
    same(lambda: built.encode_deliver(seq, data), lambda: source.encode_deliver(seq, data))
    same(lambda: built.encode_push(data, tag), lambda: source.encode_push(data, tag))
    same(lambda: built.encode_confirm(tag, seq), lambda: source.encode_confirm(tag, seq))
    same(lambda: built.encode_pushes([data, payload], [tag, seq]), lambda: source.encode_pushes([data, payload],
                                                                                                [tag, seq]))
    same(lambda: built.encode_confirms([(tag, seq)]), lambda: source.encode_confirms([(tag, seq)]))


addresses = st.one_of(st.sampled_from(["0.0.0.0", "127.0.0.1", "10.1.2.3", "::1", "x", "256.0.0.1"]),
                      st.text(max_size=8))
ports = st.one_of(st.integers(0, 0xFFFF), st.integers(-2, 2), st.just(70000))


@st.composite
def frame_fields(draw):
    kind = draw(st.sampled_from(["Deliver", "Push", "Confirm", "Request", "Forward", "Keepalive", "KeepaliveAck"]))
    if kind in ("Deliver", "Confirm"):
        return kind, (draw(u48), draw(st.binary(max_size=10)) if kind == "Deliver" else draw(u48))
    if kind == "Push":
        return kind, (draw(st.binary(max_size=10)), draw(u48))
    if kind in ("Request", "Forward"):
        return kind, (draw(addresses), draw(ports), draw(u48), draw(u48))
    if kind == "Keepalive":
        return kind, (draw(addresses), draw(ports), draw(u48), draw(st.binary(min_size=15, max_size=17)),
                      draw(st.booleans()))
    return kind, (draw(st.binary(min_size=15, max_size=17)), draw(st.one_of(st.none(), u48)))


@EXAMPLES
@given(fields=st.lists(frame_fields(), min_size=0, max_size=6))
def test_encoding_and_packing_frames_agrees(builds, fields):
    built, source = builds
    built_frames = [getattr(built, kind)(*args) for kind, args in fields]
    source_frames = [getattr(source, kind)(*args) for kind, args in fields]
    for mine, theirs in zip(built_frames, source_frames):
        same(lambda mine=mine: built.encode(mine), lambda theirs=theirs: source.encode(theirs))
    same(lambda: built.pack(built_frames), lambda: source.pack(source_frames))


@EXAMPLES
@given(encoded=st.lists(st.binary(max_size=30), max_size=12), limit=st.integers(1, 100))
def test_pack_greedy_agrees(builds, encoded, limit):
    built, source = builds
    same(lambda: built.pack_greedy(list(encoded), limit), lambda: source.pack_greedy(list(encoded), limit))
    same(lambda: built.pack_greedy(iter(encoded), limit), lambda: source.pack_greedy(iter(encoded), limit))


@EXAMPLES
@given(first=st.integers(0, (1 << 48) + 3), count=st.integers(0, 70), offset=st.integers(0, 4),
       step=st.integers(6, 14), damage=st.one_of(st.none(), st.integers(0, 2000)))
def test_u48_columns_agree(builds, first, count, offset, step, damage):
    built, source = builds
    buffers = [bytearray(offset + step * count + 3) for _ in range(2)]
    same(lambda: built.put_consecutive_u48(buffers[0], offset, step, first, count),
         lambda: source.put_consecutive_u48(buffers[1], offset, step, first, count))
    assert buffers[0] == buffers[1]  # the mutated buffers agree too
    if damage is not None and damage < len(buffers[1]):
        buffers[1][damage] ^= 0x10
    data = bytes(buffers[1])
    same(lambda: built.consecutive_u48(data, offset, step, count), lambda: source.consecutive_u48(data, offset, step,
                                                                                                  count))
    same(lambda: built.u48_column(data, offset, step, count), lambda: source.u48_column(data, offset, step, count))
    if first + count <= 1 << 48:
        same(lambda: built.consecutive_u48_columns(first, count), lambda: source.consecutive_u48_columns(first, count))
    numbers = array("Q", range(first % 1000, first % 1000 + count))
    out = [bytearray(offset + step * count), bytearray(offset + step * count)]
    same(lambda: built.put_u48_column(out[0], offset, step, array("Q", numbers)),
         lambda: source.put_u48_column(out[1], offset, step, array("Q", numbers)))
    assert out[0] == out[1]


@EXAMPLES
@given(pairs=st.lists(st.tuples(st.integers(0, 30), st.integers(0, 30)), max_size=20))
def test_pair_runs_agree(builds, pairs):
    built, source = builds
    same(lambda: built.pair_runs(pairs), lambda: source.pair_runs(pairs))
    same(lambda: built.pair_runs(iter(pairs)), lambda: source.pair_runs(iter(pairs)))
