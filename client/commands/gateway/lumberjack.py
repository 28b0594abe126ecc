"""``fyrehose gateway lumberjack``: acknowledged log ingest (Lumberjack v1/v2, as Beats and Logstash speak it).

An ack from this gateway means the event is published: the backbone
CONFIRMed it, and every event before it on the connection, under a sequence
number.  See docs/lumberjack.md for the protocol, the subject rule and the
exact cases in which an event can be published twice.

The dispatcher (:mod:`fyrehose.commands.gateway`) adds ``--listen`` and
``--backbone``; everything heavy is imported inside :func:`run`.
"""
from __future__ import annotations

import argparse

from fyrehose.commands.gateway.options import DEFAULT_MAX_CLIENTS_PER_ADDRESS, add_users_argument
from fyrehose.gateways.drivers.lumberjack.driver import (
    DEFAULT_INACTIVITY_TIMEOUT,
    DEFAULT_MAX_PENDING_BYTES,
    DEFAULT_STALL_TIMEOUT,
)
from fyrehose.gateways.drivers.tls import add_tls_arguments
from fyrehose.gateways.lumberjack.events import DEFAULT_SUBJECT, DEFAULT_SUBJECT_FIELD
from fyrehose.gateways.lumberjack.protocol import DEFAULT_MAX_COMPRESSED_BYTES
from fyrehose.protocol.publishing import MAX_PUBLISH_TIMEOUT
from fyrehose.runtime.argtypes import positive_duration, positive_int, publish_timeout

DEFAULT_PUBLISH_TIMEOUT = 10.0
DEFAULT_HOLD_BYTES = 64 << 20
DEFAULT_MAX_BUFFERED_BYTES = 128 << 20


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_tls_arguments(parser)
    add_users_argument(parser)
    parser.add_argument("--metrics", metavar="HOST:PORT",
                        help="serve the gateway's counters (connections, refusals, logins, published events, ...) "
                             "for Prometheus at http://HOST:PORT/metrics")
    parser.add_argument("--subject-field", default=DEFAULT_SUBJECT_FIELD, metavar="NAME",
                        help=f"event field that gives the subject; a dotted name also walks nested objects "
                             f"(default {DEFAULT_SUBJECT_FIELD})")
    parser.add_argument("--default-subject", default=DEFAULT_SUBJECT, metavar="SUBJECT",
                        help=f"subject of events without a usable field (default {DEFAULT_SUBJECT})")
    parser.add_argument("--publish-timeout", type=publish_timeout, default=DEFAULT_PUBLISH_TIMEOUT, metavar="S",
                        help=f"wait this long for CONFIRMs before a chunk is published again "
                             f"(default {DEFAULT_PUBLISH_TIMEOUT:g}, at most {MAX_PUBLISH_TIMEOUT:g})")
    parser.add_argument("--hold-bytes", type=positive_int, default=DEFAULT_HOLD_BYTES, metavar="N",
                        help=f"keep this much of what was published to answer FORWARDs "
                             f"(default {DEFAULT_HOLD_BYTES})")
    parser.add_argument("--max-compressed-bytes", type=positive_int, default=DEFAULT_MAX_COMPRESSED_BYTES,
                        metavar="N", help=f"largest compressed frame, stored and inflated "
                                          f"(default {DEFAULT_MAX_COMPRESSED_BYTES})")
    parser.add_argument("--max-pending-bytes", type=positive_int, default=DEFAULT_MAX_PENDING_BYTES, metavar="N",
                        help=f"per connection, event bytes read but not yet published before reading pauses; "
                             f"the writer's window is advisory (default {DEFAULT_MAX_PENDING_BYTES})")
    parser.add_argument("--max-connections", type=positive_int, default=1024, metavar="N",
                        help="connections served at once; one more is closed at once (default 1024)")
    parser.add_argument("--max-clients-per-address", type=positive_int, default=DEFAULT_MAX_CLIENTS_PER_ADDRESS,
                        metavar="N", help="connections of one source address served at once, so that one host "
                                          "cannot take all of --max-connections; one more is closed at once "
                                          f"(default {DEFAULT_MAX_CLIENTS_PER_ADDRESS})")
    parser.add_argument("--max-buffered-bytes", type=positive_int, default=DEFAULT_MAX_BUFFERED_BYTES, metavar="N",
                        help="incomplete frames of all connections together, by declared size; a frame that "
                             f"does not fit ends its connection (default {DEFAULT_MAX_BUFFERED_BYTES})")
    parser.add_argument("--stall-timeout", type=positive_duration, default=DEFAULT_STALL_TIMEOUT, metavar="S",
                        help="close a connection whose incomplete frame gets no byte for this long "
                             f"(default {DEFAULT_STALL_TIMEOUT:g})")
    parser.add_argument("--client-inactivity-timeout", type=positive_duration, default=DEFAULT_INACTIVITY_TIMEOUT,
                        metavar="S", help="close a connection that sends nothing for this long while none of its "
                                          "events are being published, as Logstash's beats input does "
                                          f"(default {DEFAULT_INACTIVITY_TIMEOUT:g})")


def run(args: argparse.Namespace) -> int:
    import logging
    import os
    import signal
    import sys
    from collections import Counter

    import gevent

    from fyrehose.drivers.link import BackboneLink
    from fyrehose.gateways.drivers.lumberjack.server import LumberjackServer
    from fyrehose.gateways.drivers.metrics import gateway_metrics
    from fyrehose.gateways.drivers.tls import context_from
    from fyrehose.gateways.drivers.users_file import access_from, announce
    from fyrehose.gateways.lumberjack.events import SubjectRule
    from fyrehose.net.addresses import parse_hostport
    from fyrehose.protocol.recent_messages import RecentMessages
    from fyrehose.runtime.metrics import MetricsServer
    from fyrehose.runtime.readiness import announce_ready
    from fyrehose.subjects.session import SubjectSession

    tls = context_from(args)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="lumberjack %(message)s")
    access = access_from(args.users, Counter())
    rule = SubjectRule(args.subject_field, args.default_subject)
    listen = parse_hostport(args.listen)
    backbone = parse_hostport(args.backbone, 2323)

    link_stats: Counter[str] = Counter()
    link = BackboneLink(args.backbone, SubjectSession(stats=link_stats), None, stats=link_stats,
                        publish_timeout=args.publish_timeout, bind=args.bind, held=RecentMessages(args.hold_bytes))
    try:
        server = LumberjackServer(listen, link, rule, tls=tls, max_connections=args.max_connections,
                                  max_compressed_bytes=args.max_compressed_bytes,
                                  max_pending_bytes=args.max_pending_bytes,
                                  max_buffered_bytes=args.max_buffered_bytes, stall_timeout=args.stall_timeout,
                                  inactivity_timeout=args.client_inactivity_timeout, access=access,
                                  max_connections_per_address=args.max_clients_per_address)
        for signum in (signal.SIGTERM, signal.SIGINT):
            gevent.signal_handler(signum, server.stop)
        metrics = None if args.metrics is None else MetricsServer(parse_hostport(args.metrics), lambda: gateway_metrics(
            "lumberjack", dict(server.stats) | dict(link_stats), link.reachable, 0, server.clients)).start()
        announce(access, args.users)
        announce_ready("gateway lumberjack", server.address,
                       f"{'TLS, ' if tls else ''}pid {os.getpid()}, backbone {backbone[0]}:{backbone[1]}")
        server.serve()
        server.close(grace=args.publish_timeout + 1)
        if metrics is not None:
            metrics.stop()
    finally:
        link.close()
    stats = ", ".join(f"{name} {count}" for name, count in sorted((server.stats + link_stats).items()))
    print(f"fyrehose gateway lumberjack stopped: {stats or 'no connections'}", file=sys.stderr, flush=True)
    return 0
