"""``fyrehose gateway redis``: unmodified Redis clients publish and subscribe through the backbone."""
from __future__ import annotations

import argparse
import time
from collections import Counter

from fyrehose.commands.gateway.options import add_server_arguments
from fyrehose.gateways.liveness import IdleTimeout
from fyrehose.gateways.redis.connection import TOO_MANY_CLIENTS, RedisConnection, RedisRoutes
from fyrehose.runtime.argtypes import non_negative_duration, positive_duration


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_server_arguments(parser)
    parser.add_argument("--request-timeout", type=positive_duration, default=1.0, metavar="S",
                        help="how long GET waits for the cache to answer (default 1)")
    parser.add_argument("--idle-timeout", type=non_negative_duration, default=0.0, metavar="S",
                        help="close a client silent for this long, unless it is subscribed, as redis-server's "
                             "'timeout' does (default 0: never)")


def run(args: argparse.Namespace) -> int:
    from fyrehose.gateways.access.login import Access, Login
    from fyrehose.gateways.drivers.driver import ConnectionDriver, log
    from fyrehose.gateways.drivers.router import GatewayRouter
    from fyrehose.gateways.drivers.runner import run_gateway
    from fyrehose.gateways.drivers.tcp import TcpClient

    stats: Counter = Counter()
    routes = RedisRoutes()

    def make_connection(client: TcpClient, router: GatewayRouter, access: Access) -> ConnectionDriver:
        login = Login(access, client.peer.rpartition(":")[0])
        if access.required and client.certificate_name is not None:
            login.certificate(client.certificate_name)  # a verified client certificate names its user
        connection = RedisConnection(routes, router, stats, request_timeout=args.request_timeout,
                                     idle=IdleTimeout(args.idle_timeout), now=time.monotonic(), login=login,
                                     warn=lambda text: log.warning("%s: %s", client.peer, text))
        return ConnectionDriver(client, connection, router, stats)

    return run_gateway(args, "redis", stats, routes.route, make_connection, wants=routes.wants,
                       refusal=TOO_MANY_CLIENTS)
