"""Runs one gateway process: the bridge to the backbone, the TCP server, and a clean stop on SIGTERM.

Import this only after ``gevent.monkey.patch_all()`` (:func:`patch`): the
backbone client uses threads, which must become greenlets of the server's
event loop.
"""
from __future__ import annotations

import argparse
import logging
import signal
import sys
from collections import Counter
from collections.abc import Callable

import gevent
from gevent.event import Event

from fyrehose.addresses import parse_hostport
from fyrehose.auth_options import credentials_from
from fyrehose.gateways.bridge import Bridge, Route
from fyrehose.gateways.tcp import Connection, GatewayServer, Session
from fyrehose.readiness import announce_ready

log = logging.getLogger("fyrehose.gateway")

SessionMaker = Callable[[Connection, Bridge], Session]


def run_gateway(args: argparse.Namespace, kind: str, stats: Counter, route: Route,
                make_session: SessionMaker, refusal: bytes = b"") -> int:
    """Serve until SIGTERM or SIGINT; print the listening address once ready.

    ``refusal``: what a client beyond ``--max-clients`` is told before it is closed.
    """
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format=f"%(asctime)s fyrehose {kind} gateway: %(message)s")
    listen = parse_hostport(args.listen)
    bridge = Bridge(args.backbone, route, stats=stats, publish_timeout=args.publish_timeout,
                    credentials=credentials_from(args), session_interval=args.session_interval,
                    bind=args.bind)
    try:
        server = GatewayServer(listen, lambda connection: make_session(connection, bridge),
                               max_pending=args.max_pending, max_clients=args.max_clients, stats=stats,
                               max_output=args.max_output, max_input=args.max_input, refusal=refusal)
        server.start()
    except BaseException:
        bridge.close()
        raise
    stop = Event()
    for signum in (signal.SIGTERM, signal.SIGINT):  # before the readiness line: a stop right after it is clean
        gevent.signal_handler(signum, stop.set)
    session = f", session {bridge.client.session.name}" if bridge.client.session is not None else ""
    announce_ready(f"gateway {kind}", server.address, f"backbone {args.backbone}{session}")
    stop.wait()
    server.stop()
    bridge.close()
    counts = dict(stats) | bridge.auth_counts()
    log.info("stopped; %s", ", ".join(f"{name} {count}" for name, count in sorted(counts.items())) or "idle")
    return 0
