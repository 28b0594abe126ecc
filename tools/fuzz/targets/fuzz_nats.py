"""Fuzz target: the NATS gateway's operation parser never raises and parses split input as the whole."""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import instrumented, main  # noqa: E402
from streams import check_incremental  # noqa: E402

with instrumented():
    from fyrehose.gateways.nats.protocol import OperationParser

SEEDS = [
    b'CONNECT {"verbose":false,"pedantic":false}\r\nPING\r\n',
    b"PUB foo 5\r\nhello\r\nPUB foo reply.1 0\r\n\r\n",
    b"HPUB foo 22 27\r\nNATS/1.0\r\nA: b\r\n\r\n\r\nhello\r\n",
    b"SUB foo.* q1 7\r\nUNSUB 7 10\r\nPONG\r\n",
]


def check(data: bytes) -> None:
    check_incremental(lambda: OperationParser(max_payload=1 << 16), lambda p, d: p.feed(d), data)


if __name__ == "__main__":
    main(check, SEEDS)
