"""The Marlin gateway's pure part: the length-framed Marlin codec (docs/gateways.md) and its incremental parser."""
from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from fyrehose.gateways.marlin import protocol as proto

channel = st.binary(max_size=30)
frames = st.one_of(
    st.builds(proto.Subscribe, channel),
    st.builds(proto.Unsubscribe, channel),
    st.builds(proto.Response, st.booleans(), st.binary(max_size=30)),
    st.builds(proto.Message, st.integers(0, 2**64 - 1), channel, st.binary(max_size=100)),
)


def chunks(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({cut % (len(data) + 1) for cut in cuts})
    pieces, start = [], 0
    for point in points + [len(data)]:
        pieces.append(data[start:point])
        start = point
    return pieces


@given(st.lists(frames, max_size=10), st.lists(st.integers(min_value=0), max_size=20))
def test_frames_survive_any_chunking(items, cuts):
    parser = proto.FrameParser()
    out = []
    for piece in chunks(b"".join(proto.encode(item) for item in items), cuts):
        out.extend(parser.feed(piece))
    assert out == items


def test_wire_layout_is_seeds_003_behind_a_length():
    assert proto.encode(proto.Subscribe(b"ch")) == b"\x00\x00\x00\x04" + b"\x00\x00ch"
    assert proto.encode(proto.Response(False, b"no")) == b"\x00\x00\x00\x05" + b"\x00\x02\x01no"
    frame = proto.encode(proto.Message(7, b"ch", b"data"))
    assert frame == struct.pack(">I", 26) + b"\x00\x03" + struct.pack(">QQH", 4, 7, 2) + b"ch" + b"data"


@settings(max_examples=300)
@given(st.lists(st.binary(max_size=40), max_size=8))
def test_garbage_is_answered_frame_by_frame_and_only_bad_lengths_are_fatal(pieces):
    parser = proto.FrameParser(max_frame=64)
    out = []
    for piece in pieces:
        out.extend(parser.feed(piece))
    fatal = [item for item in out if isinstance(item, proto.FrameError) and item.fatal]
    assert len(fatal) <= 1
    if fatal:
        assert out[-1] is fatal[0] and parser.feed(proto.encode(proto.Subscribe(b"x"))) == []


def test_well_delimited_but_wrong_frames_are_not_fatal():
    parser = proto.FrameParser()
    bad_version = b"\x00\x00\x00\x03\x01\x00x"
    unknown_type = b"\x00\x00\x00\x02\x00\x09"
    short_message = b"\x00\x00\x00\x04\x00\x03ab"
    lying_length = struct.pack(">I", 22) + b"\x00\x03" + struct.pack(">QQH", 9, 1, 0) + b"ab"
    out = parser.feed(bad_version + unknown_type + short_message + lying_length + proto.encode(proto.Subscribe(b"ok")))
    assert [type(item) for item in out] == [proto.FrameError] * 4 + [proto.Subscribe]
    assert not any(item.fatal for item in out[:4])
    assert parser.feed(b"\x00\x00\x00\x01x") == [proto.FrameError("frame length 1 outside 2..1048576", fatal=True)]
