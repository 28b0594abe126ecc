"""The compiled plain-PUB reader answers every buffer as its .py does (tests/oracle.py)."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oracle import same, twins


@pytest.fixture(scope="module")
def builds():
    return twins("fyrehose.gateways.nats.pub_scan")


pieces = st.one_of(st.binary(max_size=12), st.sampled_from([b"PUB ", b" ", b"\r\n", b"a.b", b"12", b"0", b"\xff"]))


@settings(max_examples=600, deadline=None)
@given(parts=st.lists(pieces, max_size=10), pos=st.integers(0, 12), max_payload=st.integers(0, 40),
       max_line=st.integers(0, 40))
def test_both_builds_read_the_same_plain_pub_or_leave_the_same_input(builds, parts, pos, max_payload, max_line):
    built, source = builds
    buffer = bytearray(b"".join(parts))
    same(lambda: built.plain_pub(buffer, pos, max_payload, max_line),
         lambda: source.plain_pub(buffer, pos, max_payload, max_line))
    plain = bytearray(b"xx" + b"PUB a.b 3\r\nabc\r\n")
    same(lambda: built.plain_pub(plain, 2, 3, 10), lambda: source.plain_pub(plain, 2, 3, 10))
