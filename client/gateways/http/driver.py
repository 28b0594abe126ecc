"""The driver of one HTTP connection: the common one, plus the Server-Sent Event stream it may turn into."""
from __future__ import annotations

import logging
from collections import Counter

from fyrehose.gateways.driver import ConnectionDriver
from fyrehose.gateways.http.connection import HttpConnection, Note, Stream
from fyrehose.gateways.http.gateway import HttpGateway
from fyrehose.gateways.http.stream import EventStream
from fyrehose.gateways.router import GatewayRouter
from fyrehose.gateways.tcp import TcpClient

log = logging.getLogger("fyrehose.gateway")


class HttpConnectionDriver(ConnectionDriver):
    """Carries out an :class:`HttpConnection`'s requests, its SSE stream (live routing, backfill) included."""

    def __init__(self, client: TcpClient, connection: HttpConnection, gateway: HttpGateway, router: GatewayRouter,
                 stats: Counter) -> None:
        self.gateway = gateway
        self.http = connection
        self.stream: EventStream | None = None
        super().__init__(client, connection, router, stats)

    def carry_out(self, request: object) -> None:
        if request.__class__ is Stream:
            self.stream = EventStream(self.client, self.gateway, request.pattern, self.http.sse_data,
                                      request.login)
            self.stream.start(request.last_event_id)
        elif request.__class__ is Note:
            log.warning("%s", request.line)
        else:
            super().carry_out(request)

    def closed(self) -> None:
        super().closed()
        if self.stream is not None:
            self.stream.stop()
