"""The compiled envelope codec answers every input as its .py does (tests/oracle.py)."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oracle import same, twins

NAME = "fyrehose.subjects.envelope"


@pytest.fixture(scope="module")
def builds():
    return twins(NAME)


tokens = st.text(st.characters(blacklist_categories=("Cs",)), min_size=0, max_size=6)
subjects = st.one_of(st.lists(tokens, min_size=1, max_size=4).map(".".join),
                     st.sampled_from(["orders.eu.42", "a.*.c", "a.>", ">.a", "a..b", " a", "_INBOX.x.1", "é.ü"]))
maybe_text = st.one_of(st.none(), subjects)


@st.composite
def envelopes(draw, module):
    session = draw(st.one_of(st.none(), st.text(max_size=300)))
    seqno = draw(st.one_of(st.none(), st.integers(-1, 1 << 65)))
    return module.Envelope(
        draw(subjects), draw(st.binary(max_size=40)), module.MsgType(draw(st.integers(0, 7))),
        module.Status(draw(st.integers(0, 15))), draw(maybe_text), session, seqno,
        draw(st.one_of(st.none(), st.binary(max_size=300))), draw(st.one_of(st.none(), st.binary(max_size=40))))


def _valid_payloads(built):
    full = built.Envelope("orders.eu.42", b"data", built.MsgType.SNAP, built.Status.STALE, "_INBOX.a.1", "alice.N",
                          9, b"d" * 32, b"NATS/1.0\r\n\r\n")
    return [built.encode(full), built.encode(built.Envelope("a.b", b"x")), built.encode_unsigned(full)]


@settings(max_examples=400, deadline=None)
@given(data=st.data())
def test_encode_and_encode_unsigned_agree(builds, data):
    built, source = builds
    fields = data.draw(envelopes(source))
    copy = built.Envelope(fields.subject, fields.data, built.MsgType(fields.type), built.Status(fields.status),
                          fields.reply, fields.session, fields.seqno, fields.digest, fields.headers)
    same(lambda: built.encode(copy), lambda: source.encode(fields))
    same(lambda: built.encode_unsigned(copy), lambda: source.encode_unsigned(fields))


@settings(max_examples=600, deadline=None)
@given(data=st.data(), cut=st.integers(0, 120), flip=st.integers(0, 119), value=st.integers(0, 255),
       known=st.booleans())
def test_decode_and_peek_agree_on_damaged_and_random_payloads(builds, data, cut, flip, value, known):
    built, source = builds
    payload = data.draw(st.one_of(st.binary(max_size=80), st.sampled_from(_valid_payloads(built))))
    damaged = bytearray(payload[:cut] if cut < len(payload) else payload)
    if flip < len(damaged):
        damaged[flip] = value
    for sample in (payload, bytes(damaged), damaged, memoryview(payload)):  # any buffer, as bytes() takes
        remembered_built: dict[bytes, str] | None = {} if known else None
        remembered_source: dict[bytes, str] | None = {} if known else None
        for _ in range(2):  # twice: the second time the subject is remembered
            same(lambda sample=sample, known=remembered_built: built.decode(sample, known),
                 lambda sample=sample, known=remembered_source: source.decode(sample, known))
        assert remembered_built == remembered_source
        same(lambda sample=sample: built.peek_subject(sample), lambda sample=sample: source.peek_subject(sample))
        same(lambda sample=sample: built.is_envelope(sample), lambda sample=sample: source.is_envelope(sample))


@settings(max_examples=400, deadline=None)
@given(subject=st.one_of(subjects, st.text(max_size=20)), wildcards=st.booleans())
def test_check_subject_agrees(builds, subject, wildcards):
    built, source = builds
    same(lambda: built.check_subject(subject, wildcards=wildcards),
         lambda: source.check_subject(subject, wildcards=wildcards))


def test_the_oracle_sees_a_difference():
    """Not vacuous: outcomes that differ in value or in the exception raised fail the comparison."""
    with pytest.raises(AssertionError):
        same(lambda: b"a", lambda: b"b")
    with pytest.raises(AssertionError):
        same(lambda: int("x"), lambda: None)
