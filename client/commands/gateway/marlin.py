"""``fyrehose gateway marlin``: Marlin PubSub clients (docs/gateways.md) on the backbone.

With ``--users``, a client is the user its TLS client certificate names (``--tls-ca``), else the anonymous
user; one that is neither gets a RESPONSE ERROR and is closed.
"""
from __future__ import annotations

import argparse
from collections import Counter

from fyrehose.commands.gateway.options import add_server_arguments
from fyrehose.gateways.marlin.connection import MarlinConnection, MarlinRoutes, error_response, place


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_server_arguments(parser)


def run(args: argparse.Namespace) -> int:
    import logging
    import time

    from fyrehose.gateways.access.login import Login
    from fyrehose.gateways.drivers.driver import ConnectionDriver
    from fyrehose.gateways.drivers.runner import run_gateway

    log = logging.getLogger("fyrehose.gateway")
    stats: Counter = Counter()
    routes = MarlinRoutes()

    def make_connection(client, router, access):
        login, refusal = None, None
        if access.required:  # Marlin carries no login: the client certificate names the user
            address = client.peer.rpartition(":")[0]
            login = Login(access, address)
            refusal = place(login, client.certificate_name)
            if refusal is not None and access.refused("logins refused", address, time.monotonic()):
                log.warning("%s refused: %s", client.peer, refusal)
        connection = MarlinConnection(routes, router, stats, max_held=client.max_pending, login=login, refusal=refusal)
        return ConnectionDriver(client, connection, router, stats)

    return run_gateway(args, "marlin", stats, routes.route, make_connection,
                       wants=routes.wants, refusal=error_response("max number of clients reached"))
