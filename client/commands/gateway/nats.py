"""``fyrehose gateway nats``: unmodified NATS clients publish and subscribe through the backbone.

With ``--tls-cert``/``--tls-key`` INFO says ``tls_required`` and the connection turns to TLS right after it,
as nats-server's does (``--tls-handshake-first``: TLS from the first byte, INFO inside it, nats-server's
``handshake_first``); with ``--tls-ca`` a client certificate is required and, with ``--users``, its common name
names the user (nats-server's ``verify_and_map``).
"""
from __future__ import annotations

import argparse
import os
import time
from collections import Counter

from fyrehose.commands.gateway.options import add_server_arguments
from fyrehose.gateways.liveness import NatsLiveness
from fyrehose.gateways.nats import protocol as proto
from fyrehose.gateways.nats.connection import NatsConnection, NatsRoutes, server_info
from fyrehose.runtime.argtypes import positive_duration, positive_int

HANDSHAKE_TIMEOUT = 2.0  # seconds to CONNECT, nats-server's auth_timeout
TLS_HANDSHAKE_TIMEOUT = 5.0  # with TLS: nats-server's tls timeout (2) and its auth_timeout with TLS (2 + 1)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_server_arguments(parser)
    parser.add_argument("--handshake-timeout", type=positive_duration, metavar="S",
                        help="close a client that has not sent CONNECT within this time of connecting (default 2; "
                             f"with --tls-cert {TLS_HANDSHAKE_TIMEOUT:g}, the TLS handshake included, as nats-server "
                             "allows 2 s for the handshake and 3 more for CONNECT)")
    parser.add_argument("--ping-interval", type=positive_duration, default=120.0, metavar="S",
                        help="PING a client silent for this long, as nats-server does (default 120)")
    parser.add_argument("--max-pings-out", type=positive_int, default=2, metavar="N",
                        help="unanswered PINGs before a client is closed as stale (default 2)")
    parser.add_argument("--tls-handshake-first", action="store_true",
                        help="with --tls-cert: TLS from the connection's first byte, INFO inside it (nats-server's "
                             "handshake_first; nats-py tls_handshake_first=True, nats.js tls.handshakeFirst)")


def run(args: argparse.Namespace) -> int:
    import logging

    from fyrehose.errors import InputError
    from fyrehose.gateways.access.login import Access, Login
    from fyrehose.gateways.drivers.driver import ConnectionDriver
    from fyrehose.gateways.drivers.runner import run_gateway
    from fyrehose.gateways.drivers.tcp import TcpClient
    from fyrehose.net.addresses import parse_hostport

    if args.tls_handshake_first and not args.tls_cert:
        raise InputError("--tls-handshake-first needs --tls-cert and --tls-key")
    log = logging.getLogger("fyrehose.gateway")

    stats: Counter = Counter()
    routes = NatsRoutes(stats)
    host, port = parse_hostport(args.listen)
    server_id = "FYREHOSE" + os.urandom(8).hex().upper()

    handshake = args.handshake_timeout or (TLS_HANDSHAKE_TIMEOUT if args.tls_cert else HANDSHAKE_TIMEOUT)

    def liveness() -> NatsLiveness:
        return NatsLiveness(time.monotonic(), handshake, args.ping_interval, args.max_pings_out)

    info = server_info(server_id, host, port, tls=bool(args.tls_cert), tls_verify=bool(args.tls_ca))
    mapped = bool(args.tls_ca) and args.users is not None  # the client certificate names the user

    def connection(client: TcpClient, router, access: Access) -> ConnectionDriver:
        login = Login(access, client.peer.rpartition(":")[0]) if access.required else None
        certificate = (lambda: client.certificate_name) if mapped else None
        return ConnectionDriver(client, NatsConnection(
            routes, router, stats, info=info, peer=client.peer, liveness=liveness(), max_held=client.max_pending,
            login=login, certificate=certificate, report=log.warning), router, stats)

    return run_gateway(args, "nats", stats, routes.route, connection, wants=routes.wants,
                       refusal=proto.info(info) + proto.error("maximum connections exceeded"),
                       tls_at_accept=args.tls_handshake_first, route_plain=routes.route_plain)
