"""The codec's frames of address validation: COOKIE, and KEEPALIVE / KEEPALIVE-ACK with a cookie after their fields."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fyrehose.protocol import codec

cookies = st.binary(min_size=codec.COOKIE_SIZE, max_size=codec.COOKIE_SIZE)
tokens = st.binary(min_size=codec.TOKEN_SIZE, max_size=codec.TOKEN_SIZE)


@settings(max_examples=300, deadline=None)
@given(addr=st.ip_addresses(v=4).map(str), port=st.integers(0, 65535), flags=st.integers(0, codec.MAX_TAG),
       token=tokens, cookie=st.one_of(st.just(b""), cookies))
def test_keepalive_with_or_without_a_cookie_round_trips(addr, port, flags, token, cookie):
    frame = codec.Keepalive(addr, port, flags, token, cookie=cookie)
    data = codec.encode(frame)
    assert len(data) == (codec.KEEPALIVE_COOKIE_SIZE if cookie else codec.KEEPALIVE_SIZE)
    assert data[:codec.KEEPALIVE_SIZE] == codec.encode(codec.Keepalive(addr, port, flags, token))  # a prefix
    assert codec.decode(data) == [frame]


@settings(max_examples=300, deadline=None)
@given(token=tokens, head=st.one_of(st.none(), st.integers(0, codec.MAX_SEQUENCE)), cookie=st.one_of(st.just(b""), cookies))
def test_ack_with_or_without_head_and_cookie_round_trips(token, head, cookie):
    frame = codec.KeepaliveAck(token, head, cookie)
    data = codec.encode(frame)
    assert len(data) == codec.KEEPALIVE_ACK_SIZE + (6 if head is not None else 0) + len(cookie)
    assert codec.decode(data) == [frame]


@settings(max_examples=300, deadline=None)
@given(cookie=cookies)
def test_cookie_frame_round_trips(cookie):
    data = codec.encode_cookie(cookie)
    assert data == bytes((codec.COOKIE,)) + cookie
    assert codec.decode_cookie(data) == cookie


@settings(max_examples=500, deadline=None)
@given(data=st.binary(max_size=64))
def test_any_bytes_decode_as_a_cookie_or_raise_protocol_error(data):
    try:
        cookie = codec.decode_cookie(data)
    except codec.ProtocolError:
        assert len(data) != codec.COOKIE_FRAME_SIZE or data[0] != codec.COOKIE
    else:
        assert data == codec.encode_cookie(cookie)


@settings(max_examples=500, deadline=None)
@given(rest=st.binary(max_size=64), kind=st.sampled_from([codec.KEEPALIVE, codec.KEEPALIVE_ACK, codec.COOKIE]))
def test_any_keepalive_ack_or_cookie_bytes_decode_or_raise_protocol_error(rest, kind):
    data = bytes((kind,)) + rest
    try:
        frames = codec.decode(data)
    except codec.ProtocolError:
        return
    assert codec.encode(frames[0]) == data


def test_bad_cookie_sizes_are_refused():
    with pytest.raises(codec.ProtocolError):
        codec.encode(codec.Keepalive(cookie=b"short"))
    with pytest.raises(codec.ProtocolError):
        codec.encode(codec.Keepalive(legacy=True, cookie=bytes(8)))
    with pytest.raises(codec.ProtocolError):
        codec.encode(codec.KeepaliveAck(bytes(16), cookie=bytes(9)))
    with pytest.raises(codec.ProtocolError):
        codec.encode_cookie(bytes(7))
