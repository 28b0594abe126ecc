"""The SSE backfill in this process, on a real backbone: its limit, its hand-over, and what it cannot have.

gevent runs without monkey patching, as in the gateway process: the gateway's
router and the backfill's :class:`~fyrehose.drivers.link.RangeLink` are
greenlets' drivers of the pure connection.  Only the client's TcpClient is kept
in memory, so the output can be compared byte for byte.
"""
from __future__ import annotations

import threading
import time
from collections import Counter

import gevent

from fyrehose.gateways.drivers.http.gateway import HttpGateway, HttpSettings
from fyrehose.gateways.drivers.http.stream import EventStream
from fyrehose.gateways.drivers.router import GatewayRouter
from fyrehose.gateways.http import sse
from fyrehose.subjects.envelope import Envelope

from support import EVENT_WITHIN


class MemoryClient:
    """What an event stream writes to (fyrehose.gateways.drivers.tcp.TcpClient's interface), kept in memory."""

    peer = "memory:0"
    max_pending = 1 << 20
    closing: str | None = None

    def __init__(self) -> None:
        self.output = b""

    def send(self, data: bytes) -> None:
        self.output += data

    def slow_consumer(self, detail: str) -> None:
        raise AssertionError(detail)


def wait_until(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what} did not happen within {timeout:g} s"
        gevent.sleep(0.01)


def _gateway(backbone, **settings) -> tuple[HttpGateway, GatewayRouter]:
    stats: Counter = Counter()
    gateway = HttpGateway(HttpSettings(backbone=backbone.address, **settings), stats)
    gateway.router = GatewayRouter(backbone.address, gateway.route, stats=stats, wants=gateway.wants)
    return gateway, gateway.router


def _event(seq: int, data: bytes) -> bytes:
    return sse.event(seq, "backfill.x", data)


def test_the_backfill_keeps_the_newest_within_its_limit_then_hands_over_to_the_live_stream(module_backbone):
    gateway, router = _gateway(module_backbone, backfill_limit=2)
    client = MemoryClient()
    stream = EventStream(client, gateway, "backfill.>", lambda data: data)
    threads = threading.active_count()
    try:
        seqs = router.publish([Envelope("backfill.x", b"%d" % i) for i in range(5)])
        wait_until(lambda: router.position >= seqs[-1], EVENT_WITHIN, "the gateway taking its publishes")
        position = router.position
        stream.start(seqs[0])  # wants seqs[1]..position; the limit leaves the last two
        live = router.publish([Envelope("backfill.x", b"live")])
        wait_until(lambda: b"data: live\n" in client.output, EVENT_WITHIN, "the live message after the backfill")
        assert threading.active_count() == threads
    finally:
        stream.stop()
        router.close()
    newest = [seq for seq in seqs if seq > position - 2]
    assert client.output == (sse.comment(f"lost {seqs[1]}..{position - 2} (backfill is limited to 2 messages)")
                             + b"".join(_event(seq, b"%d" % seqs.index(seq)) for seq in newest)
                             + _event(live[0], b"live"))
    assert gateway.stats["events backfilled"] == len(newest)


def test_what_no_node_holds_is_reported_lost_and_the_live_stream_follows(backbone_factory):
    backbone = backbone_factory(extra=["--recent-bytes", "0"])  # no recent log, and no journal answers
    gateway, router = _gateway(backbone, backfill_timeout=1.0)
    client = MemoryClient()
    stream = EventStream(client, gateway, "backfill.>", lambda data: data)
    try:
        seqs = router.publish([Envelope("backfill.x", b"%d" % i) for i in range(3)])
        wait_until(lambda: router.position >= seqs[-1], EVENT_WITHIN, "the gateway taking its publishes")
        position = router.position
        stream.start(seqs[0])
        live = router.publish([Envelope("backfill.x", b"live")])
        wait_until(lambda: b"data: live\n" in client.output, EVENT_WITHIN, "the live message after the backfill")
    finally:
        stream.stop()
        router.close()
    assert client.output == (sse.comment(f"lost {seqs[1]}..{position} (backfill timed out after 1 s)")
                             + _event(live[0], b"live"))
