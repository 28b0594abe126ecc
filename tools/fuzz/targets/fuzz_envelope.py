"""Fuzz target: envelope.decode returns an Envelope or None (raw payload) and never raises; what it accepts re-encodes."""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import instrumented, main  # noqa: E402

with instrumented():
    from fyrehose.subjects import envelope

SEEDS = [
    envelope.encode(envelope.Envelope("orders.eu", b"{}")),
    envelope.encode(envelope.Envelope("a.b.c", b"x" * 50, reply="_INBOX.1", session="alice.1", seqno=9, digest=b"d" * 32)),
    b"raw payload",
    envelope.MAGIC,
]


def check(data: bytes) -> None:
    decoded = envelope.decode(data)
    if decoded is None:
        return
    assert isinstance(decoded, envelope.Envelope)
    assert envelope.decode(envelope.encode(decoded)) == decoded, "an accepted envelope does not round-trip"


if __name__ == "__main__":
    main(check, SEEDS)
