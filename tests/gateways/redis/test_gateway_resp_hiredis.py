"""The hiredis-backed command parser agrees with the pure one (the oracle) on any input in any chunks."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from fyrehose.gateways.redis.hiredis_parser import HiredisCommandParser
from fyrehose.gateways.redis.protocol import CommandParser

arguments = st.binary(max_size=40)
commands = st.lists(arguments, min_size=0, max_size=5)


def encode(command: list[bytes]) -> bytes:
    return b"*%d\r\n" % len(command) + b"".join(b"$%d\r\n%s\r\n" % (len(arg), arg) for arg in command)


pieces = st.one_of(
    commands.map(encode),
    commands.map(encode),
    st.sampled_from([b"PING\r\n", b"publish a b\r\n", b"\r\n", b"*0\r\n", b"*-1\r\n", b"+OK\r\n", b":5\r\n",
                     b"$3\r\nabc\r\n", b"*1\r\n:1\r\n", b"*1\r\n*1\r\n$1\r\na\r\n", b"*1\r\n$-1\r\n",
                     b"*2\r\n$1\r\na\r\n", b"*1\r\n$2\r\nabc\r\n", b"*x\r\n", b"-ERR x\r\n", b"*01\r\n$01\r\na\r\n",
                     b"*1\r\n$ 1\r\na\r\n", b"*+1\r\n$1\r\na\r\n", b"*3000000\r\n", b"*1\r\n$9999999\r\n"]),
    st.binary(max_size=12),
)


def run(parser: CommandParser, chunks: list[bytes]) -> list:
    out: list = []
    for chunk in chunks:
        out.extend(parser.feed(chunk))
    return out


@settings(max_examples=400)
@given(st.lists(pieces, max_size=8), st.lists(st.integers(min_value=1, max_value=60), max_size=6))
def test_agrees_with_the_pure_parser(parts, cuts):
    data = b"".join(parts)
    chunks, start = [], 0
    for cut in cuts:
        chunks.append(data[start:start + cut])
        start += cut
    chunks.append(data[start:])
    limits = {"max_bulk": 1 << 20, "max_args": 1 << 20}
    assert run(HiredisCommandParser(**limits), chunks) == run(CommandParser(**limits), chunks)


@given(st.lists(commands.filter(bool), min_size=1, max_size=16))
def test_whole_reads_of_arrays_take_the_fast_path(batch):
    data = b"".join(map(encode, batch))
    parser = HiredisCommandParser()
    assert parser.feed(data) == batch
    assert not parser._buffer  # nothing went through the pure parser's buffer


def test_limits_are_the_pure_parsers():
    for limits, data in (({"max_bulk": 3}, encode([b"abcd"])), ({"max_args": 2}, encode([b"a", b"b", b"c"]))):
        assert HiredisCommandParser(**limits).feed(data) == CommandParser(**limits).feed(data)
        assert CommandParser(**limits).feed(data)[-1].__class__.__name__ == "RespError"
