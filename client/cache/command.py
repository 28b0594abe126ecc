"""``fyrehose cache``: the pure :class:`~fyrehose.cache.core.Cache` driven by one :class:`fyrehose.Client`.

The client subscribes to every subject (``>``) in sequence order, so this
process sees exactly the stream every other subscriber sees; each envelope
goes through the cache and whatever the cache returns is published (signed
when ``--auth-db`` is given, in which case the client has already dropped
every envelope that failed verification).  A loss in the stream turns every
record stale, as the cache can no longer vouch for any of them.
"""
from __future__ import annotations

import argparse
import signal
import sys
import threading
import time

from fyrehose.addresses import add_bind_argument
from fyrehose.argtypes import positive_int
from fyrehose.auth_options import add_auth_arguments, credentials_from
from fyrehose.readiness import announce_ready

DEFAULT_BACKBONE = "127.0.0.1:2323"
DEFAULT_MAX_BYTES = 64 << 20


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--backbone", default=DEFAULT_BACKBONE, metavar="HOST:PORT",
                        help=f"the backbone (default {DEFAULT_BACKBONE})")
    add_bind_argument(parser)
    parser.add_argument("--max-bytes", type=positive_int, default=DEFAULT_MAX_BYTES, metavar="N",
                        help="memory bound for records (subject + value + 256 bytes each); the least recently "
                             f"used are evicted with drop/preempted (default {DEFAULT_MAX_BYTES})")
    add_auth_arguments(parser, "cache", "cache")
    actions = parser.add_subparsers(dest="action", metavar="ACTION",
                                    description="instead of running the cache:")
    bench = actions.add_parser("bench", help="measure whether the cache keeps up with a fast stream of updates",
                               description="publish updates as fast as confirmations allow to a backbone and "
                                           "cache it starts itself; time snapshots meanwhile, check every "
                                           "subject's last value after, and the cache's CPU per update")
    from fyrehose.cache.bench import add_bench_arguments

    add_bench_arguments(bench)


def run(args: argparse.Namespace) -> int:
    if getattr(args, "action", None) == "bench":
        from fyrehose.cache.bench import run_bench

        return run_bench(args)
    from fyrehose.cache.core import Cache
    from fyrehose.client import Client, FyrehoseError
    from fyrehose.tracker import Lost

    credentials = credentials_from(args)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    cache = Cache(args.max_bytes)
    with Client(args.backbone, user=args.user, auth=credentials, session_interval=args.session_interval,
                bind=args.bind) as client:
        stream = client.subscribe(">", on_loss="yield", announce=False)
        client.interest.add("_SNAP.>")  # what it answers, announced so gateways know requests there have a responder
        client.interest.add("_SUB.>")
        session = client.session.name if client.session is not None else "none"
        announce_ready("cache", client.address, f"backbone {args.backbone}, session {session}, "
                                                f"max {args.max_bytes} bytes")
        while not stop.is_set():
            event = stream.get(timeout=0.2)
            now = time.monotonic()
            if isinstance(event, Lost):
                cache.lost()
                answers = []
            elif event is None:
                answers = []
            else:
                answers = cache.receive(event.envelope, now)
            answers += cache.poll(now)
            if answers:
                try:
                    client.publish_many(answers, timeout=2.0)
                except FyrehoseError as exc:  # the requesters retry; the cache keeps serving
                    cache.stats["publish failures"] += 1
                    sys.stderr.write(f"fyrehose cache: publishing {len(answers)} answers failed: {exc}\n")
        counts = dict(cache.stats) | ({f"auth {k}": v for k, v in client.auth.stats.items()} if client.auth else {})
    summary = " ".join(f"{name.replace(' ', '_')}={value}" for name, value in sorted(counts.items()))
    sys.stderr.write(f"fyrehose cache: {len(cache.records)} records, {cache.bytes} bytes; {summary}\n")
    return 0
