"""The compiled in-order step answers as its .py does, alone and inside the connection (tests/oracle.py)."""
from __future__ import annotations

from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fyrehose.protocol import codec, connection

from deliver_streams import connection_for, feed, options, streams
from oracle import plain, same, twins


@pytest.fixture(scope="module")
def builds():
    return twins("fyrehose.protocol.in_order")


@settings(max_examples=600)
@given(first=st.integers(0, (1 << 48) + 2), sizes=st.lists(st.integers(0, 5), min_size=1, max_size=6),
       uniform=st.booleans(), shift=st.sampled_from([0, 0, 1, -1, 3]), damage=st.one_of(
           st.none(), st.tuples(st.integers(0, 200), st.integers(0, 255)), st.integers(0, 200)))
def test_both_builds_recognise_the_same_datagrams(builds, first, sizes, uniform, shift, damage):
    built, source = builds
    first = max(1, min(first, (1 << 48) - len(sizes)))
    if uniform:
        sizes = [sizes[0]] * len(sizes)
    data = bytearray(b"".join(codec.encode_deliver(first + index, b"p" * size) for index, size in enumerate(sizes)))
    if isinstance(damage, tuple):
        data[damage[0] % len(data)] = damage[1]
    elif damage is not None:
        del data[damage % len(data):]
    for expected in (first + shift, first, 0, 1 << 48):
        same(lambda expected=expected: built.continuing_step(bytes(data), expected),
             lambda expected=expected: source.continuing_step(bytes(data), expected))


@settings(max_examples=300)
@given(connection_options=options(), start=st.sampled_from([None, 1, 2, 4]), stream=streams())
def test_a_connection_gives_the_same_with_either_build(builds, connection_options, start, stream):
    built, source = builds
    make = connection_for(connection_options)
    compiled = feed(make, start, stream)
    with mock.patch.object(connection, "continuing_step", source.continuing_step):
        pure = feed(make, start, stream)
    assert plain(compiled) == plain(pure)
