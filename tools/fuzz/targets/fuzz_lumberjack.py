"""Fuzz target: the Lumberjack FrameDecoder raises only LumberjackError, and split input decodes as the whole.

A decoder that raised is broken for good (the connection closes), so the
invariant is: the whole stream decodes to the same frames as any split of it,
or both fail; frames a split run returned before failing are a prefix of what
decoding the stream up to the failure point gives.
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import instrumented, main  # noqa: E402
from streams import split_points  # noqa: E402

with instrumented():
    from fyrehose.gateways.lumberjack import protocol as lj

LIMIT = 1 << 16

SEEDS = [
    lj.encode_window(10) + lj.encode_json(1, b'{"message":"hi"}'),
    lj.encode_key_value(1, {"line": "x", "host": "h"}) + lj.encode_key_value(2, {}),
    lj.encode_window(2) + lj.encode_compressed([lj.encode_json(1, b"{}"), lj.encode_json(2, b'{"a":1}')]),
    lj.encode_ack(5),
]


def decode(pieces: list[bytes]) -> tuple[list, bool]:
    decoder = lj.FrameDecoder(max_event_bytes=LIMIT, max_compressed_bytes=LIMIT)
    out: list = []
    for piece in pieces:
        try:
            out += decoder.feed(piece)
        except lj.LumberjackError:
            return out, True
    return out, False


def check(data: bytes) -> None:
    whole, whole_failed = decode([data])
    pieces, start = [], 0
    for point in split_points(data) + [len(data)]:
        pieces.append(data[start:point])
        start = point
    split, split_failed = decode(pieces)
    assert split_failed == whole_failed, "a split stream fails differently from the whole"
    if not whole_failed:
        assert split == whole, f"split decoding differs: {split!r} != {whole!r}"


if __name__ == "__main__":
    main(check, SEEDS)
