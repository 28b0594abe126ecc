"""``fyrehose sub``: print the stream in sequence order from the shell; exit 3 if anything was lost."""
from __future__ import annotations

import argparse
import sys
import time

from fyrehose.errors import InputError
from fyrehose.net.addresses import add_backbone_arguments, add_multicast_argument
from fyrehose.runtime.argtypes import positive_duration

EXIT_LOSS = 3


def _sequence(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("sequence numbers start at 1")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_backbone_arguments(parser)
    parser.add_argument("--from", dest="from_seq", type=_sequence, metavar="SEQ",
                        help="start at this sequence, backfilling older messages from other clients' journals")
    parser.add_argument("--count", type=int, metavar="N", help="exit after N messages")
    parser.add_argument("--timeout", type=positive_duration, metavar="S", help="exit after S seconds")
    parser.add_argument("--give-up", type=positive_duration, default=10.0, metavar="S",
                        help="report a gap as lost after S seconds of REQUESTs (default 10)")
    parser.add_argument("--no-journal", action="store_true", help="set NOJOURNAL: serve no FORWARDs")
    add_multicast_argument(parser)


def run(args: argparse.Namespace) -> int:
    from fyrehose.drivers.client import Client
    from fyrehose.protocol.tracker import Lost

    if args.count is not None and args.count < 1:
        raise InputError("--count must be at least 1")
    end = time.monotonic() + args.timeout if args.timeout else None
    out = sys.stdout
    lost = 0
    received = 0
    with Client(args.backbone, journal=not args.no_journal, give_up_after=args.give_up,
                bind=args.bind, multicast=args.multicast) as client:
        stream = client.subscribe(from_seq=args.from_seq, on_loss="yield")
        while args.count is None or received < args.count:
            wait = None if end is None else end - time.monotonic()
            if wait is not None and wait <= 0:
                break
            event = stream.get(timeout=0) or (out.flush() or stream.get(timeout=wait))
            if event is None:
                continue
            if isinstance(event, Lost):
                lost += event.count
                sys.stderr.write(f"lost {event.from_seq}..{event.to_seq} ({event.reason})\n")
                continue
            received += 1
            out.write(f"{event.seq}\t{event.data.decode('utf-8', 'backslashreplace')}\n")
        out.flush()
    return EXIT_LOSS if lost else 0
