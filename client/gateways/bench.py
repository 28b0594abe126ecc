"""``fyrehose gateway bench``: messages/s through each gateway and through redis-server and nats-server.

Every target is driven by the same client library as its peer, in the same
run: redis-py (asyncio) for redis-server and the Redis gateway, nats-py for
nats-server and the NATS gateway, and an asyncio client built on
:mod:`fyrehose.gateways.marlin_protocol` for the Marlin gateway (which has no
peer server).  One publisher connection sends ``--messages`` messages as fast
as its client allows (Redis: pipelines of 500 PUBLISH; NATS: buffered PUB;
Marlin: written in batches of 500; WebSocket and SSE: see
:mod:`fyrehose.gateways.http.bench`) to ``--subscribers`` subscriber
connections; the figure is messages/s per subscriber, from the first publish
until every subscriber has every message.  Targets run alternately (the
order reverses every run) and the median of ``--runs`` runs is reported.

With redis-server or the Redis gateway among the targets, each run also
drives both with ``redis-benchmark`` (Debian redis-tools), unmodified:
``PUBLISH`` to a channel without subscribers, ``--redis-benchmark-requests``
requests over 50 connections pipelining 16 (its own figure is requests/s;
through the gateway each reply waits for the backbone's confirmation).  The
ratio gateway/redis-server is computed per run, in the same run.

The benchmark starts everything it measures itself, on loopback: a
``--workers 0`` backbone, the three gateways, redis-server and nats-server
(from the OS packages), and stops them all by PID when it ends.
"""
from __future__ import annotations

import argparse
import csv
import functools
import io
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from fyrehose.argtypes import positive_duration, positive_int
from fyrehose.errors import CommandFailed, InputError
from fyrehose.gateways.http import bench as http_bench
from fyrehose.process import FYREHOSE, ChildProcess, wait_until
from fyrehose.readiness import free_port

TARGETS = ("redis-server", "redis-gateway", "nats-server", "nats-gateway", "marlin-gateway", *http_bench.TARGETS)
LOOPBACK = "127.0.0.1"
BATCH = 500
REDIS_BENCHMARK_CLIENTS = 50
REDIS_BENCHMARK_PIPELINE = 16


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--messages", type=positive_int, default=20000, metavar="N",
                        help="messages per run (default 20000)")
    parser.add_argument("--size", type=positive_int, default=100, metavar="BYTES",
                        help="payload size (default 100)")
    parser.add_argument("--subscribers", type=positive_int, default=4, metavar="N",
                        help="subscriber connections per target (default 4)")
    parser.add_argument("--runs", type=positive_int, default=3, metavar="N",
                        help="runs per target; the median is reported (default 3)")
    parser.add_argument("--targets", default=",".join(TARGETS), metavar="LIST",
                        help=f"comma-separated subset of {','.join(TARGETS)}")
    parser.add_argument("--timeout", type=positive_duration, default=120, metavar="S",
                        help="give up on a run after S seconds (default 120)")
    parser.add_argument("--redis-benchmark-requests", type=positive_int, default=100000, metavar="N",
                        help="PUBLISH requests per redis-benchmark run (default 100000)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON instead of a table")


def run(args: argparse.Namespace) -> int:
    import asyncio

    import orjson

    targets = [name.strip() for name in args.targets.split(",") if name.strip()]
    unknown = sorted(set(targets) - set(TARGETS))
    if unknown or not targets:
        raise InputError(f"unknown targets {', '.join(unknown) or '(none)'}; choose from {', '.join(TARGETS)}")
    with tempfile.TemporaryDirectory(prefix="fyrehose-gateway-bench-") as scratch, Processes(Path(scratch)) as procs:
        addresses = procs.start(targets)
        results: dict[str, list[float]] = {target: [] for target in targets}
        redis_targets = [target for target in targets if target in ("redis-server", "redis-gateway")]
        benchmark: dict[str, list[float]] = {target: [] for target in redis_targets}
        for number in range(args.runs):
            order = targets if number % 2 == 0 else targets[::-1]
            for target in order:
                rate = asyncio.run(measure(target, addresses[target], args, f"bench.{number}.{target}"))
                results[target].append(rate)
                print(f"run {number + 1}/{args.runs} {target}: {rate:,.0f} msgs/s per subscriber",
                      file=sys.stderr, flush=True)
            for target in redis_targets if number % 2 == 0 else redis_targets[::-1]:
                rate = redis_benchmark_publish(addresses[target], args.redis_benchmark_requests, args.size,
                                               args.timeout)
                benchmark[target].append(rate)
                print(f"run {number + 1}/{args.runs} redis-benchmark PUBLISH {target}: {rate:,.0f} requests/s",
                      file=sys.stderr, flush=True)
    report = {
        "machine": {"cores": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "messages": args.messages, "size": args.size, "subscribers": args.subscribers, "runs": args.runs,
        "results": {target: {"median_msgs_per_s": statistics.median(rates),
                             "median_deliveries_per_s": statistics.median(rates) * args.subscribers,
                             "runs_msgs_per_s": rates}
                    for target, rates in results.items()},
    }
    if benchmark:
        section: dict = {target: {"median_requests_per_s": statistics.median(rates), "runs_requests_per_s": rates}
                         for target, rates in benchmark.items()}
        if len(benchmark) == 2:
            ratios = [gateway / server for gateway, server in zip(benchmark["redis-gateway"], benchmark["redis-server"])]
            section["median_ratio_gateway_to_server"] = statistics.median(ratios)
            section["runs_ratio_gateway_to_server"] = ratios
        report["redis_benchmark_publish"] = {"requests": args.redis_benchmark_requests,
                                             "clients": REDIS_BENCHMARK_CLIENTS,
                                             "pipeline": REDIS_BENCHMARK_PIPELINE, "results": section}
    if args.json:
        print(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode())
    else:
        print(table(report))
    return 0


def table(report: dict) -> str:
    lines = [f"{report['messages']} messages of {report['size']} bytes to {report['subscribers']} subscribers, "
             f"median of {report['runs']} runs, {report['machine']['cores']} cores",
             f"{'target':<16}{'msgs/s per subscriber':>24}{'deliveries/s':>16}"]
    for target, result in report["results"].items():
        lines.append(f"{target:<16}{result['median_msgs_per_s']:>24,.0f}{result['median_deliveries_per_s']:>16,.0f}")
    benchmark = report.get("redis_benchmark_publish")
    if benchmark:
        lines.append(f"redis-benchmark PUBLISH, {benchmark['requests']} requests, {benchmark['clients']} clients, "
                     f"pipeline {benchmark['pipeline']}, median of {report['runs']} runs")
        for target in ("redis-server", "redis-gateway"):
            if target in benchmark["results"]:
                lines.append(f"{target:<16}{benchmark['results'][target]['median_requests_per_s']:>24,.0f} requests/s")
        if "median_ratio_gateway_to_server" in benchmark["results"]:
            lines.append(f"gateway/server, median of per-run ratios: "
                         f"{benchmark['results']['median_ratio_gateway_to_server']:.2f}")
    return "\n".join(lines)


# ---------------------------------------------------------------- the processes under test

@dataclass
class Processes:
    """Every process the benchmark starts; all are killed by PID on exit."""

    scratch: Path
    started: list[ChildProcess] = field(default_factory=list)

    def __enter__(self) -> Processes:
        return self

    def __exit__(self, *exc: object) -> None:
        for process in self.started:
            process.kill()

    def start(self, targets: list[str]) -> dict[str, tuple[str, int]]:
        addresses: dict[str, tuple[str, int]] = {}
        if "redis-server" in targets:
            port = free_port(socket.SOCK_STREAM)
            self._spawn([_binary("redis-server"), "--port", str(port), "--bind", LOOPBACK, "--save", "",
                         "--appendonly", "no", "--dir", str(self.scratch)])
            addresses["redis-server"] = (LOOPBACK, port)
        if "nats-server" in targets:
            port = free_port(socket.SOCK_STREAM)
            self._spawn([_binary("nats-server"), "-a", LOOPBACK, "-p", str(port)])
            addresses["nats-server"] = (LOOPBACK, port)
        gateways = [target for target in targets if target.endswith("-gateway")]
        if gateways:
            backbone = f"{LOOPBACK}:{free_port(socket.SOCK_DGRAM)}"
            self._spawn(FYREHOSE + ["backbone", "--listen", backbone, "--workers", "0",
                                    "--state-dir", str(self.scratch / "backbone")]).wait_ready(30)
            for target in gateways:
                kind = http_bench.TARGETS.get(target, target.removesuffix("-gateway"))
                process = self._spawn(FYREHOSE + ["gateway", kind, "--listen", f"{LOOPBACK}:0", "--backbone", backbone])
                addresses[target] = process.wait_ready(30)
        for target, address in addresses.items():
            wait_until(functools.partial(_accepts, address), 30,
                       f"{target} accepting connections on {address[0]}:{address[1]}", interval=0.1)
        return addresses

    def _spawn(self, command: list[str]) -> ChildProcess:
        process = ChildProcess(command, self.scratch / f"{Path(command[0]).name}-{len(self.started)}.log")
        self.started.append(process)
        return process


def _binary(name: str) -> str:
    found = shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/bin:/sbin")
    if found is None:
        raise CommandFailed(f"{name} is not installed (Debian package {name}, see tools/test-packages.txt)")
    return found


def _accepts(address: tuple[str, int]) -> bool:
    try:
        with socket.create_connection(address, timeout=1):
            return True
    except OSError:
        return False


# ---------------------------------------------------------------- one measurement

def redis_benchmark_publish(address: tuple[str, int], requests: int, size: int, timeout: float) -> float:
    """Requests/s of redis-benchmark's PUBLISH against ``address`` (its own CSV figure)."""
    host, port = address
    command = [_binary("redis-benchmark"), "-h", host, "-p", str(port), "-n", str(requests),
               "-c", str(REDIS_BENCHMARK_CLIENTS), "-P", str(REDIS_BENCHMARK_PIPELINE), "--csv",
               "PUBLISH", "bench.redis-benchmark", "x" * size]
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    rows = list(csv.reader(io.StringIO(result.stdout)))
    if result.returncode != 0 or len(rows) < 2 or rows[0][:2] != ["test", "rps"]:
        raise CommandFailed(f"redis-benchmark failed (exit {result.returncode}): {result.stderr.strip()[-200:]}")
    return float(rows[1][1])


async def measure(target: str, address: tuple[str, int], args: argparse.Namespace, channel: str) -> float:
    """Messages/s per subscriber for one run against one target."""
    import asyncio

    drive = http_bench.DRIVERS.get(target) or {"redis": _redis, "nats": _nats, "marlin": _marlin}[target.split("-")[0]]
    payload = os.urandom(args.size // 2 + 1).hex()[:args.size].encode()
    elapsed = await asyncio.wait_for(drive(address, args.messages, args.subscribers, channel, payload),
                                     args.timeout)
    return args.messages / elapsed


async def _redis(address, messages: int, subscribers: int, channel: str, payload: bytes) -> float:
    import asyncio

    import redis.asyncio as redis

    host, port = address
    clients = [redis.Redis(host=host, port=port) for _ in range(subscribers + 1)]
    pubsubs = [client.pubsub() for client in clients[:subscribers]]
    for pubsub in pubsubs:
        await pubsub.subscribe(channel)
        if await pubsub.get_message(timeout=10) is None:
            raise CommandFailed(f"no subscribe confirmation from {host}:{port}")

    async def receive(pubsub) -> None:
        received = 0
        async for message in pubsub.listen():
            if message["type"] == "message":
                received += 1
                if received == messages:
                    return

    started = time.perf_counter()
    readers = [asyncio.create_task(receive(pubsub)) for pubsub in pubsubs]
    publisher = clients[-1]
    for start in range(0, messages, BATCH):
        pipe = publisher.pipeline(transaction=False)
        for _ in range(min(BATCH, messages - start)):
            pipe.publish(channel, payload)
        await pipe.execute()
    await asyncio.gather(*readers)
    elapsed = time.perf_counter() - started
    for pubsub in pubsubs:
        await pubsub.aclose()
    for client in clients:
        await client.aclose()
    return elapsed


async def _nats(address, messages: int, subscribers: int, channel: str, payload: bytes) -> float:
    import asyncio

    import nats

    url = f"nats://{address[0]}:{address[1]}"
    clients = [await nats.connect(url, pending_size=64 << 20) for _ in range(subscribers + 1)]
    remaining = [subscribers]
    done = asyncio.Event()

    def counter():
        received = [0]

        async def on_message(_message) -> None:
            received[0] += 1
            if received[0] == messages:
                remaining[0] -= 1
                if not remaining[0]:
                    done.set()

        return on_message

    for client in clients[:subscribers]:
        await client.subscribe(channel, cb=counter(), pending_msgs_limit=messages + 1,
                               pending_bytes_limit=(messages + 1) * (len(payload) + 128))
        await client.flush()
    publisher = clients[-1]
    started = time.perf_counter()
    for _ in range(messages):
        await publisher.publish(channel, payload)
    await publisher.flush()
    await done.wait()
    elapsed = time.perf_counter() - started
    for client in clients:
        await client.close()
    return elapsed


async def _marlin(address, messages: int, subscribers: int, channel: str, payload: bytes) -> float:
    import asyncio

    from fyrehose.gateways import marlin_protocol as proto

    connections = [await asyncio.open_connection(*address) for _ in range(subscribers + 1)]
    for reader, writer in connections[:subscribers]:
        writer.write(proto.encode(proto.Subscribe(channel.encode())))
        await writer.drain()
        parser = proto.FrameParser()
        answer: list = []
        while not answer:
            data = await reader.read(4096)
            if not data:
                raise CommandFailed("the Marlin gateway closed a subscriber")
            answer = parser.feed(data)

    async def receive(reader) -> None:
        parser = proto.FrameParser()
        received = 0
        while received < messages:
            data = await reader.read(1 << 20)
            if not data:
                raise CommandFailed("the Marlin gateway closed a subscriber")
            received += sum(isinstance(frame, proto.Message) for frame in parser.feed(data))

    started = time.perf_counter()
    readers = [asyncio.create_task(receive(reader)) for reader, _ in connections[:subscribers]]
    _, writer = connections[-1]
    frame = proto.encode(proto.Message(0, channel.encode(), payload))
    for start in range(0, messages, BATCH):
        writer.write(frame * min(BATCH, messages - start))
        await writer.drain()
    await asyncio.gather(*readers)
    elapsed = time.perf_counter() - started
    for _, writer in connections:
        writer.close()
    return elapsed
