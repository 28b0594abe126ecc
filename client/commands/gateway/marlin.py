"""``fyrehose gateway marlin``: Marlin PubSub clients (docs/gateways.md) on the backbone."""
from __future__ import annotations

import argparse
from collections import Counter

from fyrehose.commands.gateway.options import add_server_arguments
from fyrehose.gateways.marlin.connection import MarlinConnection, MarlinRoutes, error_response


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_server_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from fyrehose.gateways.driver import ConnectionDriver
    from fyrehose.gateways.runner import run_gateway

    stats: Counter = Counter()
    routes = MarlinRoutes()
    return run_gateway(args, "marlin", stats, routes.route,
                       lambda client, router, access: ConnectionDriver(
                           client, MarlinConnection(routes, router, stats, max_held=client.max_pending), router, stats),
                       wants=routes.wants, refusal=error_response("max number of clients reached"))
