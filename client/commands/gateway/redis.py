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
    from fyrehose.gateways.driver import ConnectionDriver
    from fyrehose.gateways.runner import run_gateway

    stats: Counter = Counter()
    routes = RedisRoutes()
    return run_gateway(args, "redis", stats, routes.route,
                       lambda client, router, access: ConnectionDriver(client, RedisConnection(
                           routes, router, stats, request_timeout=args.request_timeout,
                           idle=IdleTimeout(args.idle_timeout), now=time.monotonic()), router, stats),
                       wants=routes.wants, refusal=TOO_MANY_CLIENTS)
