"""What every connection of one HTTP gateway shares: the routes from the stream, limits, counters.

The backbone stream reaches two kinds of local subscribers: RESP connections
over WebSocket (the Redis gateway's own :class:`~fyrehose.gateways.redis.connection.RedisRoutes`,
so channels, patterns and receiver counts mean exactly what they mean on the
Redis gateway) and Server-Sent Event streams, indexed by subject pattern.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from typing import TYPE_CHECKING

from fyrehose.gateways.channels import channel_to_subject_or_none, subject_to_channel
from fyrehose.gateways.drivers.metrics import gateway_metrics
from fyrehose.gateways.http.settings import HttpSettings
from fyrehose.gateways.http.websocket import StreamMark
from fyrehose.gateways.redis.connection import RedisRoutes
from fyrehose.runtime.metrics import render
from fyrehose.subjects.envelope import Envelope
from fyrehose.subjects.patterns import SubjectIndex

if TYPE_CHECKING:
    from fyrehose.gateways.drivers.http.stream import EventStream
    from fyrehose.gateways.drivers.router import GatewayRouter


class StreamCountingRoutes(RedisRoutes):
    """The Redis gateway's routes, whose receiver count (a RESP ``PUBLISH``'s reply) includes the SSE streams."""

    def __init__(self, streams: SubjectIndex) -> None:
        super().__init__()
        self.streams = streams

    def receivers(self, channel: bytes) -> int:
        count = super().receivers(channel)
        subject = channel_to_subject_or_none(channel)
        if self.streams and subject is not None:
            count += len(self.streams.lookup(subject))
        return count


@dataclass
class HttpGateway:
    settings: HttpSettings
    stats: Counter = field(default_factory=Counter)
    streams: SubjectIndex = field(default_factory=SubjectIndex)
    mark: StreamMark = field(default_factory=StreamMark)
    router: GatewayRouter | None = None
    clients: Callable[[], int] | None = None  # clients connected now (the TCP server's count)

    def __post_init__(self) -> None:
        self.redis_routes = StreamCountingRoutes(self.streams)
        # the live view's files, read once at start: a request never waits for the disk on the loop
        folder = resources.files("fyrehose.gateways.http").joinpath("static")
        self._static = {entry.name: entry.read_bytes() for entry in folder.iterdir() if entry.is_file()}

    def route(self, seq: int, message: Envelope) -> None:
        """Hand one message of the ordered stream to every local subscriber it matches."""
        self.mark.seq = seq
        try:
            self.redis_routes.route(seq, message)
        finally:
            self.mark.seq = 0
        if self.streams:
            for stream in self.streams.lookup(message.subject):
                stream.deliver(seq, message)

    def wants(self, subject: str) -> bool:
        """Whether a message on ``subject`` may reach a RESP client or an SSE stream here."""
        return self.redis_routes.wants(subject) or bool(self.streams.lookup(subject))

    def add_stream(self, stream: EventStream) -> None:
        self.streams.add(stream.pattern, stream)
        if self.router is not None:
            self.router.interest.add(stream.pattern)

    def remove_stream(self, stream: EventStream) -> None:
        if self.streams.discard(stream.pattern, stream) and self.router is not None:
            self.router.interest.remove(stream.pattern)

    def receivers(self, subject: str) -> int:
        """Deliveries a message on ``subject`` makes in the whole deployment, counted as Redis counts them."""
        local = self.redis_routes.receivers(subject_to_channel(subject))
        elsewhere = self.router.subscribers_elsewhere(subject) if self.router is not None else 0
        return local + elsewhere

    def static(self, name: str) -> bytes:
        """A file of the live view (the package's static folder, as it was when the gateway started)."""
        return self._static[name]

    def healthy(self) -> bool:
        return self.router is not None and self.router.reachable

    def metrics_text(self) -> bytes:
        """The gateway's counters in the Prometheus text format."""
        return render(gateway_metrics("http", dict(self.stats), self.healthy(),
                                      self.router.position if self.router is not None else 0,
                                      self.clients() if self.clients is not None else None)).encode()
