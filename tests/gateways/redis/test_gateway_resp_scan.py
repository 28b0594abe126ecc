"""The compiled pass over a read's arrays gives what the general parser gives: any input, split anywhere, any limits."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from fyrehose.gateways.incremental import IncrementalParser
from fyrehose.gateways.redis.array_scan import whole_commands
from fyrehose.gateways.redis.protocol import ARG_OVERHEAD, CommandParser


class GeneralLoop(CommandParser):
    """The parser without the pass: every item read one at a time (the definition of what is accepted)."""

    feed = IncrementalParser.feed


def encode(command: list[bytes]) -> bytes:
    return b"*%d\r\n" % len(command) + b"".join(b"$%d\r\n%s\r\n" % (len(arg), arg) for arg in command)


commands = st.lists(st.binary(max_size=30), min_size=0, max_size=5)
pieces = st.one_of(
    commands.map(encode),
    commands.map(encode),
    st.sampled_from([b"PING\r\n", b"publish a b\r\n", b"\r\n", b"*0\r\n", b"*-1\r\n", b"*01\r\n$01\r\na\r\n",
                     b"*1\r\n$ 1\r\na\r\n", b"*+1\r\n$1\r\na\r\n", b"* 1\r\n$1\r\na\r\n", b"*1\r\n$1\r\naXY",
                     b"*1\r\n$1_0\r\n", b"*3000000\r\n", b"*1\r\n$9999999\r\n", b"*1\r\n$99999999999999999999\r\n",
                     b"*1\r", b"*1\n", b"*1\r\n$1\r\n", b"*2\r\n$1\r\na\r\n:1\r\n", b"*\r\n", b"*1\r\n$\r\n",
                     b"*1\r\n$4\r\nAUTH\r\n", b"*1\r\n$5\r\nhello\r\n"]),
    st.binary(max_size=12),
)
limits = st.fixed_dictionaries({
    "max_bulk": st.integers(0, 40), "max_args": st.integers(0, 6),
    "max_command": st.integers(0, 6 * (40 + ARG_OVERHEAD)),
})


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    chunks, start = [], 0
    for cut in cuts:
        chunks.append(data[start:start + cut])
        start += cut
    chunks.append(data[start:])
    return chunks


def run(parser: CommandParser, chunks: list[bytes], guarded: bool) -> tuple[list, int]:
    parser.guarded = guarded
    out: list = []
    for chunk in chunks:
        out.extend(parser.feed(chunk))
    return out, parser.held


@settings(max_examples=600)
@given(st.lists(pieces, max_size=8), st.lists(st.integers(0, 60), max_size=6), limits, st.booleans())
def test_the_parser_gives_what_the_general_loop_gives(parts, cuts, bounds, guarded):
    chunks = split(b"".join(parts), cuts)
    assert run(CommandParser(**bounds), chunks, guarded) == run(GeneralLoop(**bounds), chunks, guarded)


@settings(max_examples=600)
@given(st.lists(pieces, max_size=8), limits)
def test_the_pass_reads_a_prefix_of_what_the_general_loop_reads(parts, bounds):
    data = b"".join(parts)
    scanned, end = whole_commands(data, bounds["max_bulk"], bounds["max_args"], bounds["max_command"])
    assert 0 <= end <= len(data)
    general = GeneralLoop(**bounds)
    assert general.feed(data[:end]) == scanned  # the same commands, ending exactly where they end
    assert general.held == 0 and general.failed is None
    assert GeneralLoop(**bounds).feed(data)[:len(scanned)] == scanned


@given(st.lists(commands.filter(bool), min_size=1, max_size=16))
def test_whole_reads_of_arrays_are_read_in_one_pass(batch):
    data = b"".join(map(encode, batch))
    assert whole_commands(data, 1 << 20, 1 << 20, 1 << 30) == (batch, len(data))


def test_the_pass_stops_where_the_general_parser_must_decide():
    publish = encode([b"PUBLISH", b"a", b"hello"])
    for tail in (b"*0\r\n", b"PING\r\n", b"*+1\r\n", b"*1\r\n$5\r\nhel", b"*1\r\n$1\r\nab", b"*2\r\n$1\r\na\r\n:1\r\n"):
        assert whole_commands(publish + tail, 1 << 20, 1 << 20, 1 << 30) == ([[b"PUBLISH", b"a", b"hello"]],
                                                                          len(publish))
    assert whole_commands(publish, 4, 8, 1 << 30) == ([], 0)  # an argument beyond max_bulk
    assert whole_commands(publish, 8, 2, 1 << 30) == ([], 0)  # more arguments than max_args
    assert whole_commands(publish, 8, 8, 3 * ARG_OVERHEAD + 12) == ([], 0)  # the command beyond max_command
    assert whole_commands(publish, 8, 8, 3 * ARG_OVERHEAD + 13) == ([[b"PUBLISH", b"a", b"hello"]], len(publish))
