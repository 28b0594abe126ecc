"""Runs one gateway process: the router to the backbone, the TCP server, and a clean stop on SIGTERM.

Everything runs on one gevent loop without monkey patching: the router's
link to the backbone is a gevent driver of the pure connection.
"""
from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import sys
from collections import Counter
from collections.abc import Callable

import gevent
from gevent.event import Event

from fyrehose.gateways.access.login import Access
from fyrehose.gateways.drivers.metrics import gateway_metrics
from fyrehose.gateways.drivers.router import GatewayRouter, Route, RoutePlain, Wants
from fyrehose.gateways.drivers.tcp import ClientDriver, GatewayServer, TcpClient
from fyrehose.gateways.drivers.tls import context_from
from fyrehose.gateways.drivers.users_file import access_from, announce
from fyrehose.gateways.drivers.workers import reuse_port_listener, run_workers
from fyrehose.net.addresses import parse_hostport
from fyrehose.protocol.codec import Address
from fyrehose.runtime.credentials import credentials_from
from fyrehose.runtime.metrics import MetricsServer
from fyrehose.runtime.readiness import announce_ready

log = logging.getLogger("fyrehose.gateway")

ORPHAN_POLL = 0.5  # seconds between a worker's looks at whether its supervisor still runs

ConnectionMaker = Callable[[TcpClient, GatewayRouter, Access], ClientDriver]


def run_gateway(args: argparse.Namespace, kind: str, stats: Counter, route: Route,
                make_connection: ConnectionMaker, wants: Wants | None = None, *,
                refusal: bytes = b"", tls_at_accept: bool = True, route_plain: RoutePlain | None = None) -> int:
    """Serve until SIGTERM or SIGINT; print the listening address once ready.

    ``refusal``: what a client beyond ``--max-clients`` (or ``--max-clients-per-address``) is told before it is
    closed; ``tls_at_accept`` False: TLS starts after the connection's greeting (NATS's INFO) instead of at
    accept; ``route_plain``: the gateway routes a plain message from its encoded envelope (NATS).
    """
    if getattr(args, "workers", 1) > 1:  # kinds without --workers (workers.WORKER_KINDS) run as one process
        return run_workers(args, kind)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format=f"%(asctime)s fyrehose {kind} gateway: %(message)s")
    ssl_context = context_from(args)
    access = access_from(args.users, stats)
    host, port = parse_hostport(args.listen)
    listen: Address | socket.socket = reuse_port_listener(host, port) if getattr(args, "reuse_port", False) else (host, port)
    router = GatewayRouter(args.backbone, route, stats=stats, publish_timeout=args.publish_timeout,
                    credentials=credentials_from(args), session_interval=args.session_interval,
                    bind=args.bind, wants=wants, multicast=args.multicast,
                    route_plain=route_plain)
    try:
        server = GatewayServer(listen, lambda client: make_connection(client, router, access),
                               max_pending=args.max_pending, max_clients=args.max_clients, stats=stats,
                               ssl_context=ssl_context if tls_at_accept else None, max_output=args.max_output,
                               max_input=args.max_input, refusal=refusal,
                               max_clients_per_address=args.max_clients_per_address,
                               tls_after_greeting=None if tls_at_accept else ssl_context)
        server.start()
    except BaseException:
        router.close()
        if isinstance(listen, socket.socket):
            listen.close()
        raise
    stop = Event()
    for signum in (signal.SIGTERM, signal.SIGINT):  # before the readiness line: a stop right after it is clean
        gevent.signal_handler(signum, stop.set)
    if getattr(args, "reuse_port", False):  # a worker of --workers N: it must not outlive its supervisor
        gevent.spawn(_stop_when_orphaned, os.getppid(), stop)
    metrics = _serve_metrics(args.metrics, kind, stats, router, server)
    announce(access, args.users)
    session = f", session {router.session.name}" if router.session is not None else ""
    announce_ready(f"gateway {kind}", server.address, f"backbone {args.backbone}{session}")
    stop.wait()
    if metrics is not None:
        metrics.stop()
    server.stop()
    router.close()
    counts = dict(stats) | router.auth_counts()
    log.info("stopped; %s", ", ".join(f"{name} {count}" for name, count in sorted(counts.items())) or "idle")
    return 0


def _serve_metrics(listen: str | None, kind: str, stats: Counter, router: GatewayRouter,
                   server: GatewayServer) -> MetricsServer | None:
    """``--metrics``: a thread of its own serves the scrapes; it reads copies of what the loop counts."""
    if listen is None:
        return None
    return MetricsServer(parse_hostport(listen), lambda: gateway_metrics(
        kind, dict(stats) | router.auth_counts(), router.reachable, router.position, server.clients)).start()


def _stop_when_orphaned(supervisor: int, stop: Event) -> None:
    """Stop this worker once its supervisor is gone, even killed with SIGKILL (it is then re-parented)."""
    while not stop.is_set():
        gevent.sleep(ORPHAN_POLL)
        if os.getppid() != supervisor:
            log.warning("supervisor (pid %d) is gone; stopping", supervisor)
            stop.set()
