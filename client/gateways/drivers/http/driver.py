"""The driver of one HTTP connection: the common one, plus the Server-Sent Event stream it may turn into."""
from __future__ import annotations

import logging
from collections import Counter

from fyrehose.gateways.drivers.driver import ConnectionDriver
from fyrehose.gateways.drivers.http.gateway import HttpGateway
from fyrehose.gateways.drivers.http.stream import EventStream
from fyrehose.gateways.drivers.router import GatewayRouter
from fyrehose.gateways.drivers.tcp import TcpClient
from fyrehose.gateways.http.connection import HttpConnection, Note, Stream

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
