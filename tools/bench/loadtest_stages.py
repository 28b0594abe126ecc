"""CPU per message of the load test's pure state machines, stage by stage, offline: what the generator costs before sockets.

``python -m fyrehose.tools.bench.loadtest_stages [--batch 500] [--payload 64] [--requests 400] [--json PATH]``
drives one :class:`ConfirmedPublisher` and one :class:`MeasuringSubscriber` against the
pure backbone core (no sockets, no Locust, no gevent) and times, with the
process's CPU clock, each stage over ``--requests`` requests of ``--batch``
messages:

- ``publish``: building a request's tagged, packed PUSH datagrams;
- ``confirm``: receiving its CONFIRM datagram and matching it;
- ``deliver``: a subscriber receiving a DELIVER datagram (checked, journaled,
  accounted) and releasing it into the tally;

and ``backbone``: the core sequencing the PUSHes and making the CONFIRMs and
DELIVERs (for comparison: the generator should cost less than this).  The
sum of publish, confirm and one subscriber's deliver is what one published
and once-subscribed message costs the generator's sessions; the load test's
goal is 0.3 µs or less (docs/loadtest.md).  Figures vary with the host's
load: run it on a quiet machine, several times.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import TextIO

from fyrehose.backbone.core import Backbone
from fyrehose.loadtest.account import DeliveryAccount
from fyrehose.loadtest.confirmed_publisher import ConfirmedPublisher
from fyrehose.loadtest.measuring_subscriber import MeasuringSubscriber
from fyrehose.loadtest.stamp import stamp
from fyrehose.protocol import codec

BACKBONE = ("127.0.0.1", 2323)
PUBLISHER = ("127.0.0.1", 40001)
SUBSCRIBER = ("127.0.0.1", 40002)
STAGES = ("publish", "confirm", "deliver", "backbone")


def measure(batch: int, payload: int, requests: int) -> dict:
    """µs of CPU per message of each stage over ``requests`` requests of ``batch`` messages."""
    backbone = Backbone(recent_bytes=0)
    publisher = ConfirmedPublisher(BACKBONE, timeout=60.0)
    subscriber = MeasuringSubscriber(BACKBONE, DeliveryAccount(lambda published: 0), give_up_after=60.0)
    spent = dict.fromkeys(STAGES, 0.0)
    cpu = time.process_time
    now = 1000.0
    # both connections' KEEPALIVEs, so the backbone knows the subscriber (BATCH) and the publisher
    for connection, address in ((publisher.connection, PUBLISHER), (subscriber.connection, SUBSCRIBER)):
        for datagram in connection.handle_timers(now)[0]:
            backbone.receive(datagram, address, now)
    for data, to in backbone.flush(now).sends:
        (publisher if to == PUBLISHER else subscriber).receive(bytes(data), BACKBONE, now)
    published_ns = time.time_ns()
    confirmed = delivered = 0
    for _ in range(requests):
        payloads = [stamp(published_ns, payload)] * batch
        began = cpu()
        _, datagrams = publisher.publish(payloads, now)
        sequenced = cpu()
        for datagram in datagrams:
            backbone.receive(datagram, PUBLISHER, now)
        out = backbone.flush(now).sends
        ended = cpu()
        sends = [(bytes(data), to) for data, to in out]  # as a socket would hand them over
        spent["publish"] += sequenced - began
        spent["backbone"] += ended - sequenced
        for data, to in sends:
            began = cpu()
            if to == PUBLISHER:
                confirmed += len(publisher.receive(data, BACKBONE, now))
                spent["confirm"] += cpu() - began
            elif data[0] == codec.DELIVER:
                released, _ = subscriber.receive(data, BACKBONE, now)
                report = subscriber.release(released, time.time_ns())
                spent["deliver"] += cpu() - began
                delivered += sum(getattr(event, "messages", 0) for event in report)
    messages = batch * requests
    if confirmed != requests or delivered != messages:
        raise RuntimeError(f"{confirmed} of {requests} requests confirmed, {delivered} of {messages} delivered")
    per_message = {stage: seconds / messages * 1e6 for stage, seconds in spent.items()}
    per_message["sessions"] = per_message["publish"] + per_message["confirm"] + per_message["deliver"]
    return {"batch": batch, "payload": payload, "requests": requests, "us_per_message": per_message}


def write_table(result: dict, out: TextIO) -> None:
    out.write(f"load test sessions offline: {result['requests']} requests of {result['batch']} messages of "
              f"{result['payload']} bytes; CPU per message\n")
    for stage, value in result["us_per_message"].items():
        out.write(f"{stage:<10}{value:>8.3f} us\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fyrehose.tools.bench.loadtest_stages", description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=500, help="messages per request (default 500)")
    parser.add_argument("--payload", type=int, default=64, help="bytes per message (default 64)")
    parser.add_argument("--requests", type=int, default=400, help="requests timed (default 400)")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the figures as JSON here")
    args = parser.parse_args(argv)
    if args.batch < 1 or args.requests < 1 or args.payload < 12:
        print("fyrehose loadtest stages: error: --batch and --requests must be at least 1, --payload 12",
              file=sys.stderr)
        return 1
    result = measure(args.batch, args.payload, args.requests)
    write_table(result, sys.stdout)
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
