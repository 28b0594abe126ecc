"""The compiled pass over a read's RESP arrays answers every read as its .py does (tests/oracle.py)."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oracle import same, twins


@pytest.fixture(scope="module")
def builds():
    return twins("fyrehose.gateways.redis.array_scan")


pieces = st.one_of(st.binary(max_size=12), st.sampled_from([b"*", b"$", b"\r\n", b"1", b"2", b"0", b"3\r\n", b"abc",
                                                            b"*1\r\n$1\r\na\r\n", b"9" * 20, b"\xff", b"-"]))


@settings(max_examples=800, deadline=None)
@given(parts=st.lists(pieces, max_size=12), max_bulk=st.integers(0, 40), max_args=st.integers(0, 6),
       max_command=st.integers(0, 1000))
def test_both_builds_read_the_same_commands_and_stop_at_the_same_byte(builds, parts, max_bulk, max_args, max_command):
    built, source = builds
    data = b"".join(parts)
    same(lambda: built.whole_commands(data, max_bulk, max_args, max_command),
         lambda: source.whole_commands(data, max_bulk, max_args, max_command))
    publish = b"*3\r\n$7\r\nPUBLISH\r\n$1\r\na\r\n$5\r\nhello\r\n" * 3
    same(lambda: built.whole_commands(publish, 1 << 20, 1 << 20, 1 << 62),
         lambda: source.whole_commands(publish, 1 << 20, 1 << 20, 1 << 62))
