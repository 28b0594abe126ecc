"""``fyrehose gateway bench --stages``: the CPU per message of each pure stage of a gateway, timed offline.

A gateway's CPU per message (``fyrehose gateway bench`` measures it under
redis-benchmark and nats.js's bench) is the sum of pure stages, timed here
in a loop on this process alone, and of what no loop can time apart: system
calls and gevent's event loop (their share is what remains of the measured
total).  docs/gateways.md builds its cost model from both.

Every stage is the code the gateway runs, called as the gateway calls it, on
64-byte payloads: a Redis PUBLISH from its bytes to its payload and reply,
the backbone's PUSH/CONFIRM bookkeeping, and the message's way back through
the stream: a whole datagram's frames skipped when nobody here wants them,
or decoded and framed for NATS subscribers (or framed from the encoded
envelope, a plain message's way).  The whole pure connections are
timed too, from the client's bytes to the reply released after the
confirmation (Redis, NATS, and an HTTP ``POST /v1/publish`` read by llhttp, and by h11 alone).
"""
from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from functools import partial

from fyrehose.backbone.pushes import confirm_block
from fyrehose.gateways.channels import channel_to_subject
from fyrehose.gateways.drivers.http.gateway import HttpGateway
from fyrehose.gateways.http.connection import HttpConnection
from fyrehose.gateways.http.settings import HttpSettings
from fyrehose.gateways.incremental import IncrementalParser
from fyrehose.gateways.liveness import NatsLiveness
from fyrehose.gateways.nats import protocol as nats_protocol
from fyrehose.gateways.nats.connection import MessageFrames, NatsConnection, NatsRoutes, NatsSubscription
from fyrehose.gateways.payloads import PreparedHeads, encoded, fitting
from fyrehose.gateways.redis import protocol as resp
from fyrehose.gateways.redis.connection import RedisConnection, RedisRoutes
from fyrehose.gateways.requests import Publish
from fyrehose.protocol import codec
from fyrehose.protocol.connection import BackboneConnection, ConnectionOptions, DeliverForm
from fyrehose.protocol.publishing import PendingPublishes
from fyrehose.subjects.envelope import Envelope, decode, peek_subject
from fyrehose.subjects.interest import LocalInterest
from fyrehose.subjects.patterns import SubjectIndex
from fyrehose.subjects.selection import wanted
from fyrehose.subjects.session import SubjectSession

PAYLOAD = b"x" * 64
CHANNEL = b"bench.redis-benchmark"
SUBJECT = "bench.redis-benchmark"
BACKBONE = ("127.0.0.1", 2323)


CALLS_PER_CHECK = 50  # calls between two readings of the clock, whose own cost (about 0.5 us) would count too


def _per_message(run: Callable[[], object], messages: int, seconds: float) -> float:
    """Microseconds of this process's CPU per message, over repeated calls of ``run`` (``messages`` each)."""
    calls = 0
    started = time.process_time()
    while True:
        for _ in range(CALLS_PER_CHECK):
            run()
        calls += CALLS_PER_CHECK
        elapsed = time.process_time() - started
        if elapsed >= seconds:
            return elapsed / (calls * messages) * 1e6


def _resp(pipeline: int) -> tuple[bytes, int]:
    command = b"*3\r\n$7\r\nPUBLISH\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n" % (len(CHANNEL), CHANNEL, len(PAYLOAD), PAYLOAD)
    return command * pipeline, pipeline


def _deliver_datagram(first: int, count: int, payload: bytes) -> bytes:
    return b"".join(codec.encode_deliver(seq, payload) for seq in range(first, first + count))


def stages(seconds: float = 0.3) -> dict[str, float]:
    """Each stage's CPU per message, in microseconds, each timed over ``seconds`` of CPU."""
    out: dict[str, float] = {}

    def timed(run: Callable[[], object], messages: int) -> float:
        return _per_message(run, messages, seconds)

    for pipeline in (1, 16):
        data, count = _resp(pipeline)
        reader = resp.CommandParser(max_bulk=1 << 20)

        def parse(reader: resp.CommandParser = reader, data: bytes = data) -> object:
            return reader.feed(data)

        def parse_general(reader: resp.CommandParser = reader, data: bytes = data) -> object:
            return IncrementalParser.feed(reader, data)

        out[f"redis: parse, {pipeline} per read (the compiled pass over whole arrays)"] = timed(parse, count)
        out[f"redis: parse, {pipeline} per read, the general loop alone"] = timed(parse_general, count)
    heads: PreparedHeads[bytes] = PreparedHeads(channel_to_subject)
    out["redis: PUBLISH to its payload (the channel's prepared head, size check)"] = timed(
        lambda: fitting(heads.get(CHANNEL)[1] + PAYLOAD), 1)
    out["redis: the reply (an integer)"] = timed(lambda: resp.integer(3), 1)
    message = Envelope(SUBJECT, PAYLOAD)
    out["an Envelope encoded (a PUB with a reply, an HTTP POST)"] = timed(lambda: encoded(message), 1)
    sealed = encoded(message)
    anonymous = SubjectSession()
    out["seal without credentials (the payload as it is)"] = timed(lambda: anonymous.seal_payload(sealed), 1)
    for batch in (16, 800):
        payloads = [sealed] * batch
        per = codec.MAX_DATAGRAM // codec.CONFIRM_SIZE  # the backbone's packed CONFIRMs (its work, made once)
        confirms = [confirm_block(range(first, min(first + per, batch + 1)), 1000 + first)
                    for first in range(1, batch + 1, per)]

        def push_and_confirm(payloads: list[bytes] = payloads, confirms: list[bytes] = confirms) -> None:
            _push_and_confirm(payloads, confirms)

        out[f"PUSH batch of {batch}: tags, frames, CONFIRM matching"] = timed(push_and_confirm, batch)
    stream = _stream_receive(sealed, seconds)
    out["stream: DELIVER datagram through the connection (700 per datagram)"] = stream
    routes = RedisRoutes()
    datagram = _deliver_datagram(1, 700, sealed)
    step = len(datagram) // 700
    verdicts: dict[bytes, bool] = {}

    def decide(subject: bytes) -> bool:
        return routes.wants(subject.decode())

    out["stream: skip a datagram's messages nobody here wants (per message)"] = timed(
        lambda: wanted(datagram, 1, step, None, 1, verdicts, decide), 700)
    out["stream: skip a message read one by one (subject read, redis routes' wants)"] = timed(
        lambda: routes.wants(peek_subject(sealed) or ""), 1)
    index: SubjectIndex[int] = SubjectIndex()
    index.add("bench.>", 1)
    out["nats: subscription lookup (the index)"] = timed(lambda: index.lookup(SUBJECT), 1)
    nats_routes = NatsRoutes(Counter())
    out["nats: subscription lookup, kept per subject (the route's)"] = timed(lambda: nats_routes.lookup(SUBJECT), 1)
    out["stream: decode the envelope"] = timed(lambda: decode(sealed), 1)
    pub = b"PUB %s %d\r\n%s\r\n" % (SUBJECT.encode(), len(PAYLOAD), PAYLOAD)
    nats_parser = nats_protocol.OperationParser(codec.MAX_PAYLOAD)
    out["nats: parse PUB, 16 per read"] = timed(lambda: nats_parser.feed(pub * 16), 16)
    opened = decode(sealed)
    assert opened is not None
    out["nats: MSG frame for 1 subscriber"] = timed(lambda: MessageFrames.of(opened).frame(b"1", False), 1)
    sids = [str(n).encode() for n in range(100)]
    out["nats: MSG frames for 100 subscribers, per subscriber"] = timed(
        lambda: [frames.frame(sid, False) for frames in (MessageFrames.of(opened),) for sid in sids], 100)
    delivering = NatsRoutes(Counter())
    delivering.add(NatsSubscription(_Framing(), "1", "bench.>", None))  # type: ignore[arg-type]
    out["nats: a delivered message to its MSG frame for 1 subscriber, decoded (decode, lookup, frame)"] = timed(
        lambda: delivering.route(1, decode(sealed)), 1)  # type: ignore[arg-type]
    out["nats: a delivered message to its MSG frame for 1 subscriber, from its encoded envelope"] = timed(
        lambda: delivering.route_plain(1, sealed), 1)
    for pipeline in (1, 16):
        data, count = _resp(pipeline)
        redis = RedisConnection(RedisRoutes(), _Deployment(), Counter())
        out[f"redis connection: {pipeline} PUBLISH per read, bytes to the reply released after the CONFIRM"] = timed(
            lambda redis=redis, data=data: _confirmed(redis, data), count)  # type: ignore[misc]
    nats = NatsConnection(NatsRoutes(Counter()), _Deployment(), Counter(), info={}, peer="bench:1",
                          liveness=NatsLiveness(0.0))
    nats.receive(b"CONNECT {}\r\n", 0.0)
    out["nats connection: 16 PUBs per read, bytes to the confirmation"] = timed(
        lambda: _confirmed(nats, pub * 16), 16)
    post = b"POST /v1/publish/%s HTTP/1.1\r\nHost: bench\r\nContent-Length: %d\r\n\r\n%s" % (
        SUBJECT.encode(), len(PAYLOAD), PAYLOAD)
    for llhttp, parser in ((True, "llhttp"), (False, "h11 alone")):
        http = HttpConnection(HttpGateway(HttpSettings(backbone="bench:1")), _Deployment(), 0.0, llhttp=llhttp)
        out[f"http connection: POST /v1/publish, bytes to the response after the CONFIRM ({parser})"] = timed(
            partial(_confirmed, http, post), 1)
    return out


class _Deployment:
    """The router's state a connection reads, with nobody subscribed elsewhere."""

    interest = LocalInterest("bench")
    position = 0

    def subscribers_elsewhere(self, subject: str) -> int:
        return 0


class _Framing:
    """A NATS client's connection reduced to building its frame (its outbox and echo filter are timed elsewhere)."""

    def deliver(self, seq: int, subscription: NatsSubscription, frames: MessageFrames) -> None:
        frames.frame(subscription.sid_bytes, False)


def _confirmed(connection: RedisConnection | NatsConnection | HttpConnection, data: bytes) -> bytes:
    """Feed ``data``, confirm what it published, take the replies: a connection's whole work per read."""
    connection.receive(data, 0.0)
    requests = connection.requests[:]
    connection.requests.clear()
    for request in requests:
        if isinstance(request, Publish):
            connection.published(request.token, list(range(1, len(request.payloads) + 1)))
    return connection.outbox.take()


def _push_and_confirm(payloads: list[bytes], confirms: list[bytes]) -> None:
    publishes = PendingPublishes(first_tag=1)
    publishes.start(payloads, 0.0, 5.0)
    for datagram in confirms:
        publishes.confirm_runs(codec.decode_confirm_runs(datagram))


def _stream_receive(payload: bytes, seconds: float) -> float:
    """The connection's cost per message of in-order DELIVER datagrams of 700 messages (the gateway's stream, taken
    whole as the gateway's link takes it)."""
    count = 700
    connection = BackboneConnection(BACKBONE, ConnectionOptions(flags=codec.FLAG_BATCH | codec.FLAG_NOJOURNAL,
                                                                delivers=DeliverForm.ANY_RUNS))
    connection.track(1)
    next_seq = [1]

    def one() -> None:
        datagram = _deliver_datagram(next_seq[0], count, payload)
        next_seq[0] += count
        connection.receive(datagram, BACKBONE, 0.0)

    build_only = _per_message(lambda: _deliver_datagram(next_seq[0], count, payload), count, seconds)
    return max(0.0, _per_message(one, count, seconds) - build_only)


def table(figures: dict[str, float]) -> str:
    width = max(map(len, figures))
    return "\n".join([f"{'stage':<{width}}  us CPU per message"] +
                     [f"{name:<{width}}  {value:8.2f}" for name, value in figures.items()])
