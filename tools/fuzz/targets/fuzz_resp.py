"""Fuzz target: the Redis gateway's RESP command parser never raises and parses split input as the whole.

Its compiled pass over a read's arrays gives what the general loop gives alone."""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import instrumented, main  # noqa: E402
from streams import check_incremental  # noqa: E402

with instrumented():
    from fyrehose.gateways.incremental import IncrementalParser
    from fyrehose.gateways.redis.protocol import CommandParser


class GeneralLoop(CommandParser):
    """The parser without the compiled pass: every item read one at a time."""

    feed = IncrementalParser.feed

SEEDS = [
    b"*2\r\n$9\r\nSUBSCRIBE\r\n$3\r\nfoo\r\n",
    b"*3\r\n$7\r\nPUBLISH\r\n$3\r\nfoo\r\n$5\r\nhello\r\n*1\r\n$4\r\nPING\r\n",
    b"PING\r\nSUBSCRIBE a b\r\n",
    b"*2\r\n$5\r\nHELLO\r\n$1\r\n3\r\n",
    b"*-1\r\n*0\r\n$-1\r\n",
]


def check(data: bytes) -> None:
    check_incremental(lambda: CommandParser(max_bulk=1 << 16, max_args=64), lambda p, d: p.feed(d), data)
    half = len(data) // 2
    for chunks in ([data], [data[:half], data[half:]]):  # the compiled pass agrees with the general loop
        parser, general = CommandParser(max_bulk=1 << 16, max_args=64), GeneralLoop(max_bulk=1 << 16, max_args=64)
        assert [item for chunk in chunks for item in parser.feed(chunk)] == [
            item for chunk in chunks for item in general.feed(chunk)], data


if __name__ == "__main__":
    main(check, SEEDS)
