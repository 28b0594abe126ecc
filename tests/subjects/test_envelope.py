"""The envelope codec: exact layout, round trips, raw payloads untouched, damage never raises."""
from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fyrehose.subjects.envelope import (
    FLAG_DIGEST,
    FLAG_HEADERS,
    FLAG_REPLY,
    FLAG_SESSION,
    MAGIC,
    Envelope,
    EnvelopeError,
    MsgType,
    Status,
    decode,
    encode,
    is_envelope,
    peek_subject,
)

tokens = st.text(alphabet=st.characters(blacklist_categories=("Cs", "Zs", "Zl", "Zp", "Cc"),
                                        blacklist_characters=".*>"), min_size=1, max_size=8)
subjects = st.lists(tokens, min_size=1, max_size=5).map(".".join)


@st.composite
def envelopes(draw):
    session = draw(st.none() | st.text(alphabet="abcdef0123456789.", min_size=1, max_size=40))
    return Envelope(
        subject=draw(subjects),
        data=draw(st.binary(max_size=200)),
        type=draw(st.sampled_from(list(MsgType))),
        status=draw(st.sampled_from(list(Status))),
        reply=draw(st.none() | subjects),
        session=session,
        seqno=None if session is None else draw(st.integers(0, 2**64 - 1)),
        digest=draw(st.none() | st.binary(max_size=64)),
        headers=draw(st.none() | st.binary(max_size=200)),
    )


@given(envelopes())
def test_round_trip(envelope):
    payload = encode(envelope)
    assert is_envelope(payload)
    assert decode(payload) == envelope
    assert peek_subject(payload) == envelope.subject


def test_exact_layout():
    envelope = Envelope("a.b", b"DATA", MsgType.INITIAL, Status.STALE, reply="_INBOX.x.1", session="u.n",
                        seqno=7, digest=b"\x01\x02")
    expected = (MAGIC + bytes([1, MsgType.INITIAL, Status.STALE, FLAG_REPLY | FLAG_SESSION | FLAG_DIGEST])
                + struct.pack(">H", 3) + b"a.b"
                + struct.pack(">H", 10) + b"_INBOX.x.1"
                + bytes([3]) + b"u.n" + struct.pack(">Q", 7)
                + bytes([2]) + b"\x01\x02"
                + b"DATA")
    assert encode(envelope) == expected


def test_exact_layout_with_headers_is_version_2():
    headers = b"NATS/1.0 503\r\nA: 1\r\nA: 2\r\n\r\n"
    envelope = Envelope("a.b", b"DATA", reply="r", session="u.n", seqno=7, digest=b"\x01", headers=headers)
    expected = (MAGIC + bytes([2, 0, 0, FLAG_REPLY | FLAG_SESSION | FLAG_HEADERS | FLAG_DIGEST])
                + struct.pack(">H", 3) + b"a.b"
                + struct.pack(">H", 1) + b"r"
                + bytes([3]) + b"u.n" + struct.pack(">Q", 7)
                + struct.pack(">I", len(headers)) + headers
                + bytes([1]) + b"\x01"
                + b"DATA")
    assert encode(envelope) == expected


@given(envelopes())
def test_envelopes_without_headers_stay_version_1(envelope):
    assert encode(envelope)[2] == (1 if envelope.headers is None else 2)


def _version_1_encode(envelope: Envelope) -> bytes:
    """What the version-1-only encoder wrote (kept here to prove old envelopes still decode)."""
    flags, tail = 0, b""
    if envelope.reply is not None:
        flags |= FLAG_REPLY
        tail += struct.pack(">H", len(envelope.reply.encode())) + envelope.reply.encode()
    if envelope.session is not None:
        flags |= FLAG_SESSION
        tail += bytes([len(envelope.session)]) + envelope.session.encode() + struct.pack(">Q", envelope.seqno)
    if envelope.digest is not None:
        flags |= FLAG_DIGEST
        tail += bytes([len(envelope.digest)]) + envelope.digest
    subject = envelope.subject.encode()
    return (MAGIC + bytes([1, envelope.type, envelope.status, flags]) + struct.pack(">H", len(subject)) + subject
            + tail + envelope.data)


@given(envelopes())
def test_old_version_1_envelopes_still_decode(envelope):
    old = Envelope(envelope.subject, envelope.data, envelope.type, envelope.status, envelope.reply,
                   envelope.session, envelope.seqno, envelope.digest)
    assert decode(_version_1_encode(old)) == old


@given(envelopes())
def test_version_1_ignores_the_headers_flag_like_any_unknown_bit(envelope):
    old = Envelope(envelope.subject, envelope.data, envelope.type, envelope.status, envelope.reply,
                   envelope.session, envelope.seqno, envelope.digest)
    payload = bytearray(_version_1_encode(old))
    payload[5] |= FLAG_HEADERS
    assert decode(bytes(payload)) == old


def test_unknown_versions_are_not_decoded():
    payload = bytearray(encode(Envelope("a.b", b"x", headers=b"NATS/1.0\r\n\r\n")))
    payload[2] = 3
    assert decode(bytes(payload)) is None and peek_subject(bytes(payload)) is None


@given(st.binary(max_size=300))
def test_raw_payloads_are_not_envelopes(payload):
    if payload[:2] != MAGIC:
        assert decode(payload) is None and peek_subject(payload) is None and not is_envelope(payload)


@given(st.text(max_size=100))
def test_text_never_looks_like_an_envelope(text):
    assert not is_envelope(text.encode("utf-8"))  # 0xFB never starts UTF-8


@given(envelopes(), st.data())
def test_damaged_envelopes_decode_to_none_or_an_envelope_but_never_raise(envelope, data):
    payload = bytearray(encode(envelope))
    for _ in range(data.draw(st.integers(1, 4))):
        position = data.draw(st.integers(0, len(payload) - 1))
        payload[position] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(payload)))
    for candidate in (bytes(payload), bytes(payload[:cut])):
        result = decode(candidate)
        assert result is None or isinstance(result, Envelope)
        peek_subject(candidate)


@pytest.mark.parametrize("subject", ["a.*", "a.>", "a..b", "", "a b"])
def test_wildcards_or_bad_tokens_on_the_wire_are_damage(subject):
    raw = subject.encode()
    payload = MAGIC + bytes([1, 0, 0, 0]) + struct.pack(">H", len(raw)) + raw + b"data"
    assert decode(payload) is None


def test_bad_reply_on_the_wire_is_damage():
    payload = encode(Envelope("a.b", reply="_INBOX.x")).replace(b"_INBOX.x", b"_INBOX.*")
    assert decode(payload) is None


@pytest.mark.parametrize("envelope", [
    Envelope("a.*"), Envelope("a..b"), Envelope("a", reply=">"), Envelope("a", seqno=1),
    Envelope("a", session="s"), Envelope("a", session="s" * 256, seqno=1), Envelope("a", digest=bytes(256)),
])
def test_encode_refuses_bad_envelopes(envelope):
    with pytest.raises(EnvelopeError):
        encode(envelope)
