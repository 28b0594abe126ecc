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

DEFAULT_BACKBONE = "127.0.0.1:2323"
DEFAULT_MAX_BYTES = 64 << 20


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a positive integer")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text} is not a positive number")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--backbone", default=DEFAULT_BACKBONE, metavar="HOST:PORT",
                        help=f"the backbone (default {DEFAULT_BACKBONE})")
    parser.add_argument("--max-bytes", type=_positive_int, default=DEFAULT_MAX_BYTES, metavar="N",
                        help="memory bound for records (subject + value + 256 bytes each); the least recently "
                             f"used are evicted with drop/preempted (default {DEFAULT_MAX_BYTES})")
    parser.add_argument("--user", default="cache", metavar="NAME",
                        help="user of this cache's session USER.NONCE (default cache)")
    parser.add_argument("--auth-db", metavar="FILE",
                        help="users database (fyrehose auth add): verify every envelope and sign the answers")
    parser.add_argument("--service", metavar="NAME", help="service whose users --auth-db holds (with --auth-db)")
    parser.add_argument("--session-interval", type=_positive_float, default=2.0, metavar="S",
                        help="seconds between this cache's session heartbeats (default 2)")


def run(args: argparse.Namespace) -> int:
    from fyrehose.auth import AuthDatabase, Credentials
    from fyrehose.cache.core import Cache
    from fyrehose.client import Client, FyrehoseError
    from fyrehose.tracker import Lost

    if (args.auth_db is None) != (args.service is None):
        raise ValueError("--auth-db and --service go together")
    credentials = Credentials(AuthDatabase.load(args.auth_db), args.user, args.service) if args.auth_db else None
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    cache = Cache(args.max_bytes)
    with Client(args.backbone, user=args.user, auth=credentials, session_interval=args.session_interval) as client:
        stream = client.subscribe(">", on_loss="yield")
        sys.stderr.write(f"fyrehose cache: session {client.session.name} on {args.backbone}, "  # type: ignore[union-attr]
                         f"max {args.max_bytes} bytes\n")
        sys.stderr.flush()
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
