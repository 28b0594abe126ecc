"""Fuzz target: the wire codec (decode, decode_lenient, scan) must reject bad datagrams cleanly and agree with itself."""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import instrumented, main  # noqa: E402

with instrumented():
    from fyrehose.protocol import codec

SEEDS = [
    codec.encode_push(b"hello", 7),
    codec.pack([codec.Push(b"a", 1), codec.Push(b"bb", 2), codec.Push(b"", 0)]),
    codec.encode_deliver(42, b"payload"),
    codec.pack([codec.Deliver(1, b"x"), codec.Deliver(2, b"y" * 100)]),
    codec.encode(codec.Keepalive("127.0.0.1", 2323, codec.FLAG_BATCH | codec.FLAG_HEAD, bytes(range(16)))),
    codec.encode(codec.Keepalive("10.0.0.1", 80, legacy=True)),
    codec.encode(codec.KeepaliveAck(bytes(16), 5)),
    codec.encode(codec.Request("0.0.0.0", 0, 1, 100)),
    codec.encode(codec.Forward("127.0.0.1", 9999, 3, 9)),
    codec.encode_confirm(5, 77),
    codec.encode(codec.Keepalive("0.0.0.0", 0, codec.FLAG_HEAD, bytes(16), cookie=bytes(range(8)))),
    codec.encode(codec.KeepaliveAck(bytes(16), 9, cookie=bytes(range(8)))),
    codec.encode_cookie(bytes(range(8))),
]


def check(data: bytes) -> None:
    frames, error = codec.decode_lenient(data)
    assert error is None or isinstance(error, codec.ProtocolError)
    try:
        strict = codec.decode(data)
    except codec.ProtocolError:
        strict = None
    if strict is not None:
        assert error is None and strict == frames, "decode and decode_lenient disagree"
    for kind in (codec.PUSH, codec.DELIVER):
        spans, reason = codec.scan(data, kind)
        assert reason is None or isinstance(reason, str)
        end = 0
        for start, stop, _ in spans:
            assert end <= start < stop <= len(data), "scan spans overlap or leave the datagram"
            end = stop


if __name__ == "__main__":
    main(check, SEEDS)
