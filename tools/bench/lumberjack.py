"""``python -m fyrehose.tools.bench.lumberjack``: acked events/s through the gateway vs publishing directly.

It starts its own backbone and gateway on loopback, then alternates, round by
round, three ways of getting the same events confirmed by the backbone:

* ``lumberjack``: batches of ``--batch`` events, each a ``W`` frame and one
  zlib ``C`` frame of ``J`` frames as Beats send them, encoded before the clock
  starts; the next batch goes when the last one is acked.  This is the
  gateway's own cost: parsing, inflating, JSON re-encoding, envelopes,
  publishing and acking;
* ``pylogbeat``: the same through pylogbeat, a real Beats-protocol client,
  whose own per-event encoding is timed too;
* ``direct``: ``Client.publish_many`` of the same envelopes in chunks of 512
  (the gateway's chunks, confirmed the same way): the ceiling the gateway
  works under.

It prints one JSON line (every round, medians, the ratio of the medians and
the machine's cores) and a table.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

import orjson

from fyrehose.drivers.client import Client
from fyrehose.errors import CommandFailed
from fyrehose.gateways.drivers.lumberjack.driver import CHUNK_EVENTS
from fyrehose.gateways.lumberjack.events import SubjectRule, to_message
from fyrehose.gateways.lumberjack.protocol import (
    VERSION_2,
    JsonData,
    decode_acks,
    encode_compressed,
    encode_json,
    encode_window,
)
from fyrehose.runtime.process import FYREHOSE, ChildProcess
from fyrehose.runtime.readiness import free_port


def _start(args: list[str], log: Path) -> ChildProcess:
    process = ChildProcess(FYREHOSE + args, log)
    process.wait_ready(20)
    return process


def _events(count: int, size: int, start: int) -> list[dict]:
    return [{"@metadata": {"beat": "bench"}, "n": start + n, "message": "x" * size} for n in range(count)]


def _lumberjack(port: int, events: list[dict], batch: int) -> float:
    batches = []
    for start in range(0, len(events), batch):
        frames = [encode_json(seq, orjson.dumps(event)) for seq, event in enumerate(events[start:start + batch], 1)]
        batches.append((encode_window(len(frames)) + encode_compressed(frames), len(frames)))
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        began = time.perf_counter()
        for data, last in batches:
            sock.sendall(data)
            received = b""
            while not any(seq == last for _, seq in decode_acks(received[:len(received) - len(received) % 6])):
                chunk = sock.recv(4096)
                if not chunk:
                    raise CommandFailed("the gateway closed the connection")
                received += chunk
        return time.perf_counter() - began


def _pylogbeat(port: int, events: list[dict], batch: int) -> float:
    import pylogbeat

    began = time.perf_counter()
    with pylogbeat.PyLogBeatClient("127.0.0.1", port, timeout=60) as client:
        for start in range(0, len(events), batch):
            client.send(events[start:start + batch])
    return time.perf_counter() - began


def _direct(client: Client, events: list[dict]) -> float:
    rule = SubjectRule()
    messages = [to_message(JsonData(VERSION_2, n + 1, orjson.dumps(event)), rule) for n, event in enumerate(events)]
    began = time.perf_counter()
    for start in range(0, len(messages), CHUNK_EVENTS):
        client.publish_many(messages[start:start + CHUNK_EVENTS], window=CHUNK_EVENTS)
    return time.perf_counter() - began


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fyrehose.tools.bench.lumberjack", description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=20000, help="events per round and way (default 20000)")
    parser.add_argument("--batch", type=int, default=1000, help="events per pylogbeat batch (default 1000)")
    parser.add_argument("--size", type=int, default=200, help="bytes of message text per event (default 200)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds, each running both ways (default 5)")
    args = parser.parse_args(argv)
    if min(args.events, args.batch, args.rounds) < 1 or args.size < 0:
        parser.error("--events, --batch and --rounds must be positive, --size not negative")

    with tempfile.TemporaryDirectory() as temp:
        directory = Path(temp)
        backbone_address = f"127.0.0.1:{free_port(socket.SOCK_DGRAM)}"  # the backbone speaks UDP
        gateway_port = free_port(socket.SOCK_STREAM)
        backbone = _start(["backbone", "--listen", backbone_address, "--state-dir", str(directory / "state")],
                          directory / "backbone.log")
        try:
            gateway = _start(["gateway", "lumberjack", "--listen", f"127.0.0.1:{gateway_port}",
                              "--backbone", backbone_address], directory / "gateway.log")
            try:
                rates: dict[str, list[float]] = {"lumberjack": [], "pylogbeat": [], "direct": []}
                with Client(backbone_address, subscribe=False) as client:
                    for round_number in range(args.rounds):
                        events = _events(args.events, args.size, round_number * args.events)
                        rates["lumberjack"].append(args.events / _lumberjack(gateway_port, events, args.batch))
                        rates["pylogbeat"].append(args.events / _pylogbeat(gateway_port, events, args.batch))
                        rates["direct"].append(args.events / _direct(client, events))
            finally:
                gateway.stop(20)
        finally:
            backbone.stop(20)

    medians = {way: statistics.median(values) for way, values in rates.items()}
    result = {
        "events": args.events, "batch": args.batch, "size": args.size, "rounds": args.rounds,
        "cores": os.cpu_count(), "events_per_s": rates, "median_events_per_s": medians,
        "lumberjack_vs_direct": medians["lumberjack"] / medians["direct"],
    }
    print(json.dumps(result))
    print(f"{'way':<12}{'median acked events/s':>24}   rounds")
    for way, values in rates.items():
        print(f"{way:<12}{medians[way]:>24,.0f}   {', '.join(f'{value:,.0f}' for value in values)}")
    print(f"lumberjack / direct = {result['lumberjack_vs_direct']:.2f} ({os.cpu_count()} cores)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
