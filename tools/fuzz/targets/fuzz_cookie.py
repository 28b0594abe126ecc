"""Fuzz target: a validating backbone (--validate-addresses) sends an address that never echoed its cookie nothing
but COOKIE frames, never more bytes than that datagram brought, and takes only a cookie that verifies."""
from __future__ import annotations

import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import instrumented, main  # noqa: E402

with instrumented():
    from fyrehose.backbone.cookies import CookieJar
    from fyrehose.backbone.core import Backbone
    from fyrehose.protocol import codec

KEY = bytes(range(32))
NOW = 1000.0
SOURCE = ("10.0.0.66", 7777)  # the fuzzer's datagrams come from here
JOURNALER = ("10.0.0.9", 5009)  # a validated subscriber and journaling client
PUBLISHER = ("10.0.0.7", 5007)
JAR = CookieJar(KEY)
GOOD = JAR.cookie(SOURCE, NOW)

SEEDS = [
    codec.encode(codec.Keepalive(flags=codec.FLAG_BATCH, token=bytes(range(16)))),
    codec.encode(codec.Keepalive(flags=codec.FLAG_HEAD, token=bytes(16), cookie=GOOD)),
    codec.encode(codec.Keepalive("10.0.0.66", 7778, 0, bytes(16), cookie=bytes(8))),
    codec.encode(codec.Keepalive(legacy=True)),
    codec.encode(codec.Request("0.0.0.0", 0, 1, 5)),
    codec.encode_push(b"", 3),
]


def check(data: bytes) -> None:
    backbone = Backbone(cookies=CookieJar(KEY), recent_bytes=1 << 16, rng=random.Random(0))
    backbone.receive(codec.encode(codec.Keepalive(token=bytes(16), cookie=JAR.cookie(JOURNALER, NOW))), JOURNALER, NOW)
    backbone.receive(codec.encode_push(b"before", 0), PUBLISHER, NOW)
    backbone.flush(NOW)
    backbone.receive(data, SOURCE, NOW)
    backbone.receive(codec.encode_push(b"after", 0), PUBLISHER, NOW)
    sent: dict[tuple[str, int], list[bytes]] = {}
    for datagram, to in backbone.flush(NOW).sends:
        sent.setdefault(to, []).append(bytes(datagram))
    for to, datagrams in sent.items():
        if to in (JOURNALER, PUBLISHER):
            continue
        if backbone.clients.get(to) is None:
            assert all(d[0] == codec.COOKIE and len(d) == codec.COOKIE_FRAME_SIZE for d in datagrams), datagrams
            assert sum(map(len, datagrams)) <= len(data), "more bytes to an unvalidated address than it sent"
        else:  # served: only with the cookie of the address it named
            frame = codec.decode(data)[0]
            assert isinstance(frame, codec.Keepalive) and frame.cookie == JAR.cookie(to, NOW)


if __name__ == "__main__":
    main(check, SEEDS)
