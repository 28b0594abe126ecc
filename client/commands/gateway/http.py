"""``fyrehose gateway http``: HTTP/1.1 and WebSocket on one port, for browsers and HTTP tools.

Routes: ``/resp`` RESP over WebSocket (the Redis gateway's commands and
semantics, one RESP value per binary message), ``POST /v1/publish/<subject>``,
``GET /v1/last/<subject>`` (the last-value cache), ``GET /v1/stream/<pattern>``
(Server-Sent Events), ``/metrics``, ``/healthz`` and ``/``, a live view of the
stream.  HTTP is h11's state machine and WebSocket wsproto's, driven by the
gateway's gevent server (:mod:`fyrehose.gateways.drivers.tcp`); ``--tls-cert`` and
``--tls-key`` serve https and wss instead, through gevent's own ``SSLContext``
(cooperative sockets without monkey patching; the process runs no thread).
"""
from __future__ import annotations

import argparse
from collections import Counter

from fyrehose.commands.gateway.options import add_server_arguments
from fyrehose.gateways.http.settings import DEFAULT_IDLE_TIMEOUT, DEFAULT_MAX_HEAD, DEFAULT_MAX_MESSAGE
from fyrehose.runtime.argtypes import positive_duration, positive_int
from fyrehose.runtime.credentials import credentials_from


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_server_arguments(parser)
    parser.add_argument("--request-timeout", type=positive_duration, default=1.0, metavar="S",
                        help="how long GET /v1/last and RESP GET wait for the cache to answer (default 1)")
    parser.add_argument("--max-message", type=positive_int, default=DEFAULT_MAX_MESSAGE, metavar="BYTES",
                        help="largest WebSocket message or HTTP body accepted; a larger WebSocket message "
                             f"closes with 1009, a larger body gets 413 (default {DEFAULT_MAX_MESSAGE})")
    parser.add_argument("--max-header", type=positive_int, default=DEFAULT_MAX_HEAD, metavar="BYTES",
                        help=f"longest request line and headers together; more gets 431 (default {DEFAULT_MAX_HEAD})")
    parser.add_argument("--idle-timeout", type=positive_duration, default=DEFAULT_IDLE_TIMEOUT, metavar="S",
                        help="a request must arrive whole within S seconds of the connection or the previous "
                             f"response (408, or a quiet close when nothing was sent) (default {DEFAULT_IDLE_TIMEOUT:g})")
    parser.add_argument("--allow-origin", action="append", default=[], metavar="ORIGIN",
                        help="also accept WebSocket upgrades from pages of ORIGIN (scheme://host:port; "
                             "repeatable; '*' for any); by default only the gateway's own pages")


def run(args: argparse.Namespace) -> int:
    import time

    from fyrehose.gateways.access.login import Login
    from fyrehose.gateways.drivers.http.driver import HttpConnectionDriver
    from fyrehose.gateways.drivers.http.gateway import HttpGateway
    from fyrehose.gateways.drivers.runner import run_gateway
    from fyrehose.gateways.http.connection import HttpConnection
    from fyrehose.gateways.http.settings import HttpSettings

    stats: Counter = Counter()
    settings = HttpSettings(backbone=args.backbone, max_message=args.max_message, max_head=args.max_header,
                            allow_origins=tuple(args.allow_origin), request_timeout=args.request_timeout,
                            idle_timeout=args.idle_timeout,
                            tls=args.tls_cert is not None, credentials=credentials_from(args))
    gateway = HttpGateway(settings, stats)

    def make_connection(client, router, access):
        gateway.router = router
        if gateway.clients is None and client.server is not None:
            server = client.server
            gateway.clients = lambda: server.clients
        login = Login(access, client.peer.rpartition(":")[0])  # /resp's Redis commands log in and are held to it
        return HttpConnectionDriver(client, HttpConnection(gateway, router, time.monotonic(), login), gateway, router,
                                    stats)

    return run_gateway(args, "http", stats, gateway.route, make_connection, wants=gateway.wants)
