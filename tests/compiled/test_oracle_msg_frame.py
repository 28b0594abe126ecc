"""The compiled MSG framing reads every envelope and builds every tail as its .py does (tests/oracle.py)."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oracle import same, twins


@pytest.fixture(scope="module")
def builds():
    return twins("fyrehose.gateways.nats.msg_frame")


pieces = st.one_of(st.binary(max_size=12), st.sampled_from([b"\xfb\x1e", b"\x01", b"\x02", b"\x00", b"\x00\x03",
                                                            b"a.b", b"\xff"]))


@settings(max_examples=600, deadline=None)
@given(parts=st.lists(pieces, max_size=10), start=st.integers(0, 40), reply=st.one_of(st.none(), st.binary(max_size=8)))
def test_both_builds_read_the_same_fields_and_build_the_same_tail(builds, parts, start, reply):
    built, source = builds
    data = b"".join(parts)
    same(lambda: built.plain_fields(data), lambda: source.plain_fields(data))
    start = min(start, len(data))
    same(lambda: built.msg_tail(data, start, reply), lambda: source.msg_tail(data, start, reply))
    plain = b"\xfb\x1e\x01\x00\x00\x01\x00\x03a.b\x00\x02_Ipayload"
    same(lambda: built.plain_fields(plain), lambda: source.plain_fields(plain))
