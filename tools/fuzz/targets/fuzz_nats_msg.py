"""Fuzz target: a delivered envelope framed from its bytes is declined or framed as the decoded envelope is."""
from __future__ import annotations

import os
import sys
from collections import Counter

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import instrumented, main  # noqa: E402

with instrumented():
    from fyrehose.gateways.nats.connection import MessageFrames, NatsRoutes, NatsSubscription
    from fyrehose.subjects import envelope

SEEDS = [
    envelope.encode(envelope.Envelope("orders.eu", b"{}")),
    envelope.encode(envelope.Envelope("orders.eu", b"x" * 20, reply="_INBOX.1.2")),
    envelope.encode(envelope.Envelope("orders.eu", b"v", envelope.MsgType.INITIAL, envelope.Status.NOT_FOUND)),
    envelope.encode(envelope.Envelope("a.b", b"", headers=b"NATS/1.0\r\nA: b\r\n\r\n")),
    b"raw payload",
]


class _Recorder:
    def __init__(self) -> None:
        self.frames: list[bytes] = []

    def deliver(self, seq: int, subscription: NatsSubscription, frames: MessageFrames) -> None:
        self.frames += [frames.frame(subscription.sid_bytes, False), frames.frame(subscription.sid_bytes, True)]


def _routes() -> tuple[NatsRoutes, _Recorder]:
    routes, recorder = NatsRoutes(Counter()), _Recorder()
    routes.add(NatsSubscription(recorder, "1", ">", None))  # type: ignore[arg-type]
    return routes, recorder


def check(data: bytes) -> None:
    plain, framed = _routes()
    taken = plain.route_plain(1, data)
    decoded, expected = _routes()
    opened = envelope.decode(data)
    if opened is not None:
        decoded.route(1, opened)
    if taken:
        assert opened is not None, "framed from bytes the decoder refuses"
        assert framed.frames == expected.frames, "framed otherwise than the decoded envelope"
    else:
        assert not framed.frames, "declined, yet delivered"


if __name__ == "__main__":
    main(check, SEEDS)
