"""The Lumberjack codec: frames of docs/lumberjack.md, any split of the stream, and every kind of bad input."""
from __future__ import annotations

import struct
import zlib

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fyrehose.gateways.lumberjack.protocol import (
    VERSION_1,
    VERSION_2,
    FrameDecoder,
    JsonData,
    KeyValueData,
    LumberjackError,
    WindowSize,
    decode_acks,
    encode,
    encode_ack,
    encode_compressed,
    encode_json,
    encode_key_value,
    encode_window,
)

versions = st.sampled_from([VERSION_1, VERSION_2])
seqs = st.integers(1, 2**32 - 1)
key_value = st.builds(KeyValueData, versions, seqs,
                      st.dictionaries(st.text(max_size=12), st.text(max_size=40), max_size=6))
documents = st.dictionaries(st.text(max_size=12), st.one_of(st.text(max_size=30), st.integers(-2**53, 2**53)),
                            max_size=6).map(orjson.dumps)
json_data = st.builds(JsonData, versions, seqs, documents)
data_frames = st.one_of(key_value, json_data)
windows = st.builds(WindowSize, versions, st.integers(1, 2**32 - 1))
# A stream item: a plain frame, or a compressed group of data frames (what Beats send).
items = st.one_of(windows, data_frames, st.tuples(versions, st.lists(data_frames, min_size=1, max_size=5)))


def encode_item(item) -> bytes:
    if isinstance(item, tuple):
        version, frames = item
        return encode_compressed((encode(frame) for frame in frames), version)
    return encode(item)


def expected_frames(stream) -> list:
    out = []
    for item in stream:
        out.extend(item[1] if isinstance(item, tuple) else [item])
    return out


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({cut % (len(data) + 1) for cut in cuts})
    return [data[start:end] for start, end in zip([0] + points, points + [len(data)])]


@settings(max_examples=150)
@given(st.lists(items, max_size=12), st.lists(st.integers(0, 1 << 20), max_size=20))
def test_any_split_of_a_valid_stream_decodes_to_its_frames(stream, cuts):
    data = b"".join(encode_item(item) for item in stream)
    decoder = FrameDecoder()
    decoded = []
    for piece in split(data, cuts):
        decoded.extend(decoder.feed(piece))
    assert decoded == expected_frames(stream)
    assert decoder.buffered == 0


@given(st.lists(items, min_size=1, max_size=6))
def test_a_proper_prefix_yields_no_error_and_keeps_the_rest(stream):
    data = b"".join(encode_item(item) for item in stream)
    decoder = FrameDecoder()
    decoded = decoder.feed(data[:-1])
    assert decoder.buffered > 0
    decoded += decoder.feed(data[-1:])
    assert decoded == expected_frames(stream) and decoder.buffered == 0


@settings(max_examples=500)
@given(st.binary(max_size=300), st.lists(st.integers(0, 300), max_size=5))
def test_arbitrary_bytes_give_frames_or_a_lumberjack_error(data, cuts):
    decoder = FrameDecoder(max_event_bytes=1000, max_compressed_bytes=1000)
    try:
        for piece in split(data, cuts):
            decoder.feed(piece)
    except LumberjackError:
        with pytest.raises(LumberjackError, match="already broken"):
            decoder.feed(b"1W\0\0\0\1")


@given(st.lists(data_frames, min_size=1, max_size=5), st.binary(min_size=1, max_size=50))
def test_garbage_inside_a_compressed_frame_is_an_error(frames, garbage):
    payload = b"".join(encode(frame) for frame in frames) + garbage
    packed = zlib.compress(payload)
    data = b"2C" + struct.pack(">I", len(packed)) + packed
    try:
        decoded = FrameDecoder().feed(data)
    except LumberjackError:
        return
    assert decoded[:len(frames)] == frames  # the garbage happened to be whole frames


def error_of(data: bytes, **limits) -> str:
    with pytest.raises(LumberjackError) as caught:
        FrameDecoder(**limits).feed(data)
    return str(caught.value)


def test_seed_v1_data_frame_layout():
    frame = b"1D" + struct.pack(">II", 7, 2) + struct.pack(">I", 4) + b"line" + struct.pack(">I", 2) + b"hi" \
        + struct.pack(">I", 4) + b"host" + struct.pack(">I", 1) + b"h"
    assert FrameDecoder().feed(b"1W" + struct.pack(">I", 50) + frame) == [
        WindowSize(VERSION_1, 50), KeyValueData(VERSION_1, 7, {"line": "hi", "host": "h"})]
    assert encode_key_value(7, {"line": "hi", "host": "h"}) == frame


def test_beats_v2_json_frame_and_ack_layout():
    assert FrameDecoder().feed(b"2J" + struct.pack(">II", 3, 2) + b"{}") == [JsonData(VERSION_2, 3, b"{}")]
    assert encode_ack(9, VERSION_1) == b"1A\0\0\0\x09"
    assert decode_acks(encode_ack(1) + encode_ack(2, VERSION_1) + b"2A") == [(VERSION_2, 1), (VERSION_1, 2)]


@pytest.mark.parametrize("data, message", [
    (b"3W\0\0\0\1", "unknown protocol version byte 0x33"),
    (b"\0\0", "unknown protocol version"),
    (b"2X", "unknown frame type 0x58 ('X')"),
    (b"1\xff", "unknown frame type 0xff"),
    (b"2A\0\0\0\1", "only readers send 'A'"),
    (b"2W\0\0\0\0", "window size 0"),
    (b"1D\0\0\0\1\0\0\0\1\0\0\0\2\xff\xfe\0\0\0\0", "not UTF-8"),
])
def test_bad_frames_are_named(data, message):
    assert message in error_of(data)


def test_oversize_frames_are_refused_from_their_header():
    assert "exceeds the limit of 100" in error_of(b"2J\0\0\0\1" + struct.pack(">I", 101), max_event_bytes=100)
    assert "exceeds the limit of 100" in error_of(b"1D\0\0\0\1" + struct.pack(">I", 2**32 - 1),
                                                  max_event_bytes=100)
    assert "exceeds the limit of 100" in error_of(b"1D\0\0\0\1\0\0\0\1" + struct.pack(">I", 200),
                                                  max_event_bytes=100)
    assert "exceeds the limit of 1000" in error_of(b"2C" + struct.pack(">I", 1001), max_compressed_bytes=1000)


def test_a_compression_bomb_stops_at_the_limit():
    squeezer = zlib.compressobj(9)
    zeros = bytes(1 << 20)
    packed = b"".join(squeezer.compress(zeros) for _ in range(40)) + squeezer.flush()  # 40 MiB of zeros
    assert len(packed) < 1 << 20
    bomb = b"2C" + struct.pack(">I", len(packed)) + packed
    assert "inflates beyond the limit of 33554432" in error_of(bomb)


def test_damaged_compressed_frames():
    inner = encode_json(1, b"{}")
    packed = zlib.compress(inner)

    def frame(body: bytes) -> bytes:
        return b"2C" + struct.pack(">I", len(body)) + body

    assert "not valid zlib data" in error_of(frame(b"not zlib at all"))
    assert "truncated zlib stream" in error_of(frame(packed[:-5]))
    assert "bytes after its zlib stream" in error_of(frame(packed + b"xx"))
    assert "ends inside a frame" in error_of(frame(zlib.compress(inner[:-1])))
    assert "compressed frame inside a compressed frame" in error_of(
        encode_compressed([encode_compressed([inner])]))
    assert "window size frame inside a compressed frame" in error_of(encode_compressed([encode_window(1)]))


def test_frames_before_an_error_in_the_same_feed_are_not_returned_but_earlier_feeds_stand():
    decoder = FrameDecoder()
    assert decoder.feed(encode_window(2)) == [WindowSize(VERSION_2, 2)]
    with pytest.raises(LumberjackError):
        decoder.feed(encode_json(1, b"{}") + b"2X")
    with pytest.raises(LumberjackError, match="already broken"):
        decoder.feed(encode_json(2, b"{}"))
