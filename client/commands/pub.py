"""``fyrehose pub``: publish messages from the shell, each argument or stdin line one message."""
from __future__ import annotations

import argparse
import sys

from fyrehose.errors import InputError
from fyrehose.net.addresses import add_backbone_arguments
from fyrehose.protocol.codec import MAX_PAYLOAD
from fyrehose.runtime.argtypes import publish_timeout


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_backbone_arguments(parser)
    parser.add_argument("messages", nargs="*", metavar="MESSAGE",
                        help="messages to publish; without any, each line of stdin is one message")
    parser.add_argument("--no-confirm", action="store_true",
                        help="send packed PUSHes without waiting for CONFIRM (fast, may lose messages)")
    parser.add_argument("--timeout", type=publish_timeout, default=5.0, metavar="S",
                        help="how long to wait for each CONFIRM, retries included (default 5, at most 25)")


def _lines(messages: list[str]):
    if messages:
        for message in messages:
            yield message.encode()
        return
    for line in sys.stdin.buffer:
        yield line.rstrip(b"\r\n")


def run(args: argparse.Namespace) -> int:
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
