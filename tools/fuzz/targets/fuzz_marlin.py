"""Fuzz target: the Marlin gateway's frame parser never raises and parses split input as the whole."""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import instrumented, main  # noqa: E402
from streams import check_incremental  # noqa: E402

with instrumented():
    from fyrehose.gateways.marlin import protocol as proto

SEEDS = [
    proto.encode(proto.Subscribe(b"ch")),
    proto.encode(proto.Unsubscribe(b"ch")) + proto.encode(proto.Message(7, b"ch", b"data")),
    proto.encode(proto.Response(False, b"no")),
    proto.encode(proto.Message(0, b"", b"")) * 3,
]


def check(data: bytes) -> None:
    check_incremental(lambda: proto.FrameParser(max_frame=1 << 16), lambda p, d: p.feed(d), data)


if __name__ == "__main__":
    main(check, SEEDS)
