"""``fyrehose cache``: the last-value cache (its driver is :mod:`fyrehose.cache.driver`), or ``cache bench``."""
from __future__ import annotations

import argparse

from fyrehose.net.addresses import add_backbone_arguments, add_multicast_argument, parse_hostport
from fyrehose.runtime.argtypes import positive_int
from fyrehose.runtime.credentials import add_auth_arguments, credentials_from

DEFAULT_MAX_BYTES = 64 << 20


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_backbone_arguments(parser)
    add_multicast_argument(parser)
    parser.add_argument("--max-bytes", type=positive_int, default=DEFAULT_MAX_BYTES, metavar="N",
                        help="memory bound for records (subject + value + 256 bytes each); the least recently "
                             f"used are evicted with drop/preempted (default {DEFAULT_MAX_BYTES})")
    add_auth_arguments(parser, "cache", "cache")
    parser.add_argument("--metrics", metavar="HOST:PORT",
                        help="serve the cache's position, lag, records and counters for Prometheus at "
                             "http://HOST:PORT/metrics")
    actions = parser.add_subparsers(dest="action", metavar="ACTION",
                                    description="instead of running the cache:")
    bench = actions.add_parser("bench", help="measure whether the cache keeps up with a fast stream of updates",
                               description="publish updates as fast as confirmations allow to a backbone and "
                                           "cache it starts itself; time snapshots meanwhile, check every "
                                           "subject's last value after, and the cache's CPU per update")
    from fyrehose.tools.bench.cache import add_bench_arguments

    add_bench_arguments(bench)


def run(args: argparse.Namespace) -> int:
    if getattr(args, "action", None) == "bench":
        from fyrehose.tools.bench.cache import run_bench

        return run_bench(args)
    from fyrehose.cache.driver import serve

    return serve(args.backbone, max_bytes=args.max_bytes, user=args.user, credentials=credentials_from(args),
                 session_interval=args.session_interval, bind=args.bind, multicast=args.multicast,
                 metrics=parse_hostport(args.metrics) if args.metrics else None)
