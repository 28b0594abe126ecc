"""``fyrehose gateway KIND``: one subcommand per gateway kind.

The kinds are listed by module name and imported one at a time, so a kind
whose module or optional dependency is missing only disables that kind: the
others (and their ``--help``) keep working.  Kind modules import their heavy
dependencies (gevent servers, protocol libraries) inside ``run``.
"""
from __future__ import annotations

import argparse
import importlib

from fyrehose.errors import CommandFailed
from fyrehose.gateways.drivers.workers import WORKER_KINDS
from fyrehose.net.addresses import add_backbone_arguments, add_multicast_argument
from fyrehose.runtime.argtypes import positive_int

# kind -> module providing add_arguments(parser) and run(args) -> int
KINDS = {
    "redis": "fyrehose.commands.gateway.redis",
    "nats": "fyrehose.commands.gateway.nats",
    "marlin": "fyrehose.commands.gateway.marlin",
    "lumberjack": "fyrehose.commands.gateway.lumberjack",
    "http": "fyrehose.commands.gateway.http",
}

# kind -> (default --listen, one-line help)
DEFAULTS = {
    "redis": ("127.0.0.1:6379", "serve Redis pub/sub clients (RESP2/RESP3)"),
    "nats": ("127.0.0.1:4222", "serve NATS clients (the NATS client protocol)"),
    "marlin": ("127.0.0.1:7070", "serve Marlin PubSub channel clients"),
    "lumberjack": ("127.0.0.1:5044", "receive Lumberjack (Beats) log events"),
    "http": ("127.0.0.1:8080", "serve HTTP, Server-Sent Events and RESP over WebSocket, and a live view"),
}

# Kinds whose backbone client only publishes (it takes no DELIVERs, so no multicast group either).
PUBLISH_ONLY = {"lumberjack"}

# Pseudo-kinds: commands under ``fyrehose gateway`` that are not servers and
# take no --listen/--backbone of their own.
TOOLS = {
    "bench": ("fyrehose.tools.bench.gateways", "messages/s through each gateway vs redis-server and nats-server"),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    kinds = parser.add_subparsers(dest="kind", metavar="KIND", parser_class=type(parser))
    kinds.required = True
    for kind, module_name in KINDS.items():
        listen, help_text = DEFAULTS.get(kind, (None, f"the {kind} gateway"))
        sub = kinds.add_parser(kind, help=help_text, description=help_text)
        sub.add_argument("--listen", default=listen, required=listen is None, metavar="HOST:PORT",
                         help=f"TCP address to serve clients on (default {listen})")
        add_backbone_arguments(sub)
        if kind not in PUBLISH_ONLY:
            add_multicast_argument(sub)
        if kind in WORKER_KINDS:
            sub.add_argument("--workers", type=positive_int, default=1, metavar="N",
                             help="gateway processes sharing the port with SO_REUSEPORT, each with its own "
                                  "backbone connection (default 1)")
            sub.add_argument("--reuse-port", action="store_true", help=argparse.SUPPRESS)  # set for each worker
        _add_module_arguments(sub, module_name)
    for name, (module_name, help_text) in TOOLS.items():
        sub = kinds.add_parser(name, help=help_text, description=help_text)
        _add_module_arguments(sub, module_name)


def _add_module_arguments(sub: argparse.ArgumentParser, module_name: str) -> None:
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        sub.set_defaults(unavailable=f"{module_name} cannot be imported: {exc}")
        return
    module.add_arguments(sub)


def run(args: argparse.Namespace) -> int:
    unavailable = getattr(args, "unavailable", None)
    if unavailable:
        raise CommandFailed(unavailable)
    module_name = KINDS.get(args.kind) or TOOLS[args.kind][0]
    return importlib.import_module(module_name).run(args)
