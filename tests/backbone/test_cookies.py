"""The cookie of address validation (fyrehose.backbone.cookies): a MAC of the address and a time slot.

Cookies of the current and the previous slot verify; any other bytes (forged,
older, another address's, another key's) do not; a COOKIE answer goes to an
address at most once per slot.
"""
from __future__ import annotations

import hashlib
import hmac
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fyrehose.backbone.cookies import SLOT_SECONDS, CookieJar
from fyrehose.protocol import codec

KEY = bytes(range(32))
A = ("10.0.0.1", 5001)

addresses = st.tuples(st.ip_addresses(v=4).map(str), st.integers(0, 65535))
times = st.floats(0, 1e9, allow_nan=False, allow_infinity=False)


def reference(key: bytes, addr, slot: int) -> bytes:
    """The cookie as docs/protocol.md defines it, computed independently."""
    host, port = addr
    message = bytes(int(part) for part in host.split(".")) + struct.pack(">QH", slot, port)
    return hmac.new(key, message, hashlib.sha256).digest()[:codec.COOKIE_SIZE]


@settings(max_examples=300, deadline=None)
@given(addr=addresses, now=times)
def test_the_cookie_is_the_mac_of_the_address_and_the_slot(addr, now):
    jar = CookieJar(KEY)
    slot = int(now // SLOT_SECONDS)
    assert jar.cookie(addr, now) == reference(KEY, addr, slot)
    assert len(jar.cookie(addr, now)) == codec.COOKIE_SIZE


@settings(max_examples=300, deadline=None)
@given(addr=addresses, made=times, later=st.floats(0, 3 * SLOT_SECONDS, allow_nan=False))
def test_a_cookie_verifies_in_its_slot_and_the_next_only(addr, made, later):
    jar = CookieJar(KEY)
    cookie = jar.cookie(addr, made)
    now = made + later
    age = jar.slot(now) - jar.slot(made)
    assert jar.check(cookie, addr, now) == (age if age <= 1 else None)


@settings(max_examples=300, deadline=None)
@given(addr=addresses, other=addresses, now=times)
def test_another_address_s_cookie_does_not_verify(addr, other, now):
    jar = CookieJar(KEY)
    if other != addr:
        assert jar.check(jar.cookie(other, now), addr, now) is None


@settings(max_examples=300, deadline=None)
@given(addr=addresses, now=times, forged=st.binary(min_size=0, max_size=16))
def test_forged_bytes_and_another_key_s_cookie_do_not_verify(addr, now, forged):
    jar = CookieJar(KEY)
    genuine = {jar.cookie(addr, now), jar.cookie(addr, now - SLOT_SECONDS)}
    assert (jar.check(forged, addr, now) is not None) == (forged in genuine)
    other_key = CookieJar(bytes(32))
    assert jar.check(other_key.cookie(addr, now), addr, now) is None


def test_the_previous_slot_s_cookie_says_renew():
    jar = CookieJar(KEY)
    cookie = jar.cookie(A, 100.0)
    assert jar.check(cookie, A, 100.0) == 0
    assert jar.check(cookie, A, 100.0 + SLOT_SECONDS) == 1
    assert jar.check(cookie, A, 100.0 + 2 * SLOT_SECONDS) is None


@settings(max_examples=200, deadline=None)
@given(addr=addresses, gaps=st.lists(st.floats(0, SLOT_SECONDS, allow_nan=False), min_size=1, max_size=60))
def test_an_address_gets_at_most_one_cookie_answer_per_slot(addr, gaps):
    jar = CookieJar(KEY)
    now, answered = 0.0, {}
    for gap in gaps:
        now += gap
        frame = jar.answer(addr, now)
        if frame is not None:
            slot = jar.slot(now)
            assert slot not in answered
            answered[slot] = frame
            assert frame == codec.encode_cookie(jar.cookie(addr, now))
            assert len(frame) == codec.COOKIE_FRAME_SIZE
    assert jar.slot(gaps[0]) in answered  # the first ask is answered


def test_the_answers_of_a_slot_are_bounded():
    jar = CookieJar(KEY, answered_capacity=3)
    answers = [jar.answer(("10.0.0.1", port), 5.0) for port in range(5)]
    assert [a is not None for a in answers] == [True, True, True, False, False]
    assert jar.answer(("10.0.0.1", 4), 5.0 + SLOT_SECONDS) is not None  # a new slot, a new ration


def test_a_short_key_is_refused():
    with pytest.raises(ValueError, match="at least 16 bytes"):
        CookieJar(b"short")
