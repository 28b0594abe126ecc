"""``fyrehose gateway nats``: unmodified NATS clients publish and subscribe through the backbone."""
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


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_server_arguments(parser)
    parser.add_argument("--handshake-timeout", type=positive_duration, default=2.0, metavar="S",
                        help="close a client that has not sent CONNECT within this time (default 2)")
    parser.add_argument("--ping-interval", type=positive_duration, default=120.0, metavar="S",
                        help="PING a client silent for this long, as nats-server does (default 120)")
    parser.add_argument("--max-pings-out", type=positive_int, default=2, metavar="N",
                        help="unanswered PINGs before a client is closed as stale (default 2)")


def run(args: argparse.Namespace) -> int:
    from fyrehose.gateways.driver import ConnectionDriver
    from fyrehose.gateways.runner import run_gateway
    from fyrehose.net.addresses import parse_hostport

    stats: Counter = Counter()
    routes = NatsRoutes(stats)
    host, port = parse_hostport(args.listen)
    server_id = "FYREHOSE" + os.urandom(8).hex().upper()

    def liveness() -> NatsLiveness:
        return NatsLiveness(time.monotonic(), args.handshake_timeout, args.ping_interval, args.max_pings_out)

    info = server_info(server_id, host, port)
    return run_gateway(args, "nats", stats, routes.route,
                       lambda client, router, access: ConnectionDriver(client, NatsConnection(
                           routes, router, stats, info=info, peer=client.peer, liveness=liveness(),
                           max_held=client.max_pending), router, stats),
                       wants=routes.wants, refusal=proto.info(info) + proto.error("maximum connections exceeded"))
