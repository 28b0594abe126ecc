"""``fyrehose pub`` and ``fyrehose sub``: the client from the shell."""
from __future__ import annotations

import argparse
import sys
import time

from fyrehose.errors import InputError
from fyrehose.net.addresses import add_bind_argument, add_multicast_argument
from fyrehose.protocol.codec import MAX_PAYLOAD
from fyrehose.runtime.argtypes import positive_duration, publish_timeout

DEFAULT_BACKBONE = "127.0.0.1:2323"
EXIT_LOSS = 3


def _sequence(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("sequence numbers start at 1")
    return value


def _backbone_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--backbone", default=DEFAULT_BACKBONE, metavar="HOST:PORT",
                        help=f"the backbone (default {DEFAULT_BACKBONE})")
    add_bind_argument(parser)


def add_pub_arguments(parser: argparse.ArgumentParser) -> None:
    _backbone_argument(parser)
    parser.add_argument("messages", nargs="*", metavar="MESSAGE",
                        help="messages to publish; without any, each line of stdin is one message")
    parser.add_argument("--no-confirm", action="store_true",
                        help="send packed PUSHes without waiting for CONFIRM (fast, may lose messages)")
    parser.add_argument("--timeout", type=publish_timeout, default=5.0, metavar="S",
                        help="how long to wait for each CONFIRM, retries included (default 5, at most 25)")


def add_sub_arguments(parser: argparse.ArgumentParser) -> None:
    _backbone_argument(parser)
    parser.add_argument("--from", dest="from_seq", type=_sequence, metavar="SEQ",
                        help="start at this sequence, backfilling older messages from other clients' journals")
    parser.add_argument("--count", type=int, metavar="N", help="exit after N messages")
    parser.add_argument("--timeout", type=positive_duration, metavar="S", help="exit after S seconds")
    parser.add_argument("--give-up", type=positive_duration, default=10.0, metavar="S",
                        help="report a gap as lost after S seconds of REQUESTs (default 10)")
    parser.add_argument("--no-journal", action="store_true", help="set NOJOURNAL: serve no FORWARDs")
    add_multicast_argument(parser)


def _lines(messages: list[str]):
    if messages:
        for message in messages:
            yield message.encode()
        return
    for line in sys.stdin.buffer:
        yield line.rstrip(b"\r\n")


def run_pub(args: argparse.Namespace) -> int:
    from fyrehose.drivers.client import Client

    with Client(args.backbone, subscribe=False, bind=args.bind) as client:
        for number, data in enumerate(_lines(args.messages), 1):
            if len(data) > MAX_PAYLOAD:
                raise InputError(f"message {number} is {len(data)} bytes; the maximum is {MAX_PAYLOAD}")
            if args.no_confirm:
                client.publish_nowait(data)
            else:
                print(client.publish(data, timeout=args.timeout), flush=True)
    return 0


def run_sub(args: argparse.Namespace) -> int:
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
