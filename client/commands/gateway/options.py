"""Command-line options every gateway kind shares (besides --listen and --backbone)."""
from __future__ import annotations

import argparse

from fyrehose.gateways.drivers.tls import add_tls_arguments
from fyrehose.runtime.argtypes import positive_int, publish_timeout
from fyrehose.runtime.credentials import add_auth_arguments

DEFAULT_MAX_PENDING = 8 << 20
DEFAULT_MAX_CLIENTS = 1024
DEFAULT_MAX_OUTPUT = 512 << 20
DEFAULT_MAX_INPUT = 256 << 20
DEFAULT_MAX_CLIENTS_PER_ADDRESS = 256


def add_users_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--users", metavar="FILE",
                        help="the users file (fyrehose users add): clients log in, and publish and subscribe only "
                             "within their user's rights; re-read on SIGHUP. Without it every client may publish "
                             "and subscribe to everything")


def add_server_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--max-pending", type=positive_int, default=DEFAULT_MAX_PENDING, metavar="BYTES",
                        help="output a client may leave unread before it is disconnected as a slow "
                             f"consumer (default {DEFAULT_MAX_PENDING})")
    parser.add_argument("--max-clients", type=positive_int, default=DEFAULT_MAX_CLIENTS, metavar="N",
                        help=f"clients served at once; one more is told the protocol's 'too many clients' error "
                             f"and closed (default {DEFAULT_MAX_CLIENTS})")
    parser.add_argument("--max-output", type=positive_int, default=DEFAULT_MAX_OUTPUT, metavar="BYTES",
                        help="output all clients together may leave unread; beyond it the client furthest "
                             f"behind is disconnected as a slow consumer (default {DEFAULT_MAX_OUTPUT})")
    parser.add_argument("--max-input", type=positive_int, default=DEFAULT_MAX_INPUT, metavar="BYTES",
                        help="unfinished input (incomplete commands) of all clients together; a client whose "
                             f"input would not fit is closed (default {DEFAULT_MAX_INPUT})")
    parser.add_argument("--max-clients-per-address", type=positive_int, default=DEFAULT_MAX_CLIENTS_PER_ADDRESS,
                        metavar="N", help="clients of one source address served at once, so that one host cannot "
                                          "take all of --max-clients; one more is refused as over --max-clients "
                                          f"(default {DEFAULT_MAX_CLIENTS_PER_ADDRESS})")
    add_users_argument(parser)
    add_tls_arguments(parser)
    parser.add_argument("--metrics", metavar="HOST:PORT",
                        help="serve the gateway's counters (clients, refusals of every kind, logins, slow consumers, "
                             "...) for Prometheus at http://HOST:PORT/metrics")
    parser.add_argument("--publish-timeout", type=publish_timeout, default=5.0, metavar="S",
                        help="how long a publish waits for the backbone's confirmation (default 5)")
    add_auth_arguments(parser, "gateway", "gateway")
