"""``fyrehose gateway bench``: messages/s through each gateway and through redis-server and nats-server.

Every target is driven by the same client library as its peer, in the same
run: redis-py (asyncio) for redis-server and the Redis gateway, nats-py for
nats-server and the NATS gateway, and an asyncio client built on
:mod:`fyrehose.gateways.marlin.protocol` for the Marlin gateway (which has no
peer server).  One publisher connection sends ``--messages`` messages as fast
as its client allows (Redis: pipelines of 500 PUBLISH; NATS: buffered PUB;
Marlin: written in batches of 500; WebSocket and SSE: see
:mod:`fyrehose.tools.bench.http_gateway`) to ``--subscribers`` subscriber
connections; the figure is messages/s per subscriber, from the first publish
until every subscriber has every message.  Targets run alternately (the
order reverses every run) and the median of ``--runs`` runs is reported.

Each round also runs the tools users already trust, unmodified, against
the server and against its gateway (:mod:`fyrehose.tools.bench.gateway_tools`):
``redis-benchmark -c 50`` ``PUBLISH`` at pipeline 1 and 16, and ``-c 1 -P 1``
(one client waiting for each reply: the latency of one request), when
redis-server and the Redis gateway are both targets, and the npm ``nats``
package's own ``examples/bench.js --pub --sub`` when nats-server and the NATS
gateway are; with ``--tool-size`` byte payloads (default 64).  The target
``http-gateway`` (an HTTP gateway measured by this alone) is one kept-alive
client's ``POST /v1/publish`` one at a time.  The ratio gateway/server
is taken per round, in the same round; min, median and max over the rounds
are reported, with the gateways' CPU per message.  ``--gateway-workers N``
runs each gateway as N processes on its port (``--workers N``).

The benchmark starts everything it measures itself, on loopback: a
``--workers 0`` backbone, the three gateways, redis-server and nats-server
(from the OS packages), and stops them all by PID when it ends.
"""
from __future__ import annotations

import argparse
import functools
import os
import platform
import socket
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from fyrehose.errors import CommandFailed, InputError
from fyrehose.gateways.drivers.workers import WORKER_KINDS
from fyrehose.runtime.argtypes import positive_duration, positive_int
from fyrehose.runtime.process import FYREHOSE, ChildProcess, wait_until
from fyrehose.runtime.readiness import free_port
from fyrehose.tools.bench import gateway_tools as bench_tools
from fyrehose.tools.bench import http_gateway as http_bench
from fyrehose.tools.bench.gateway_tools import binary

TARGETS = ("redis-server", "redis-gateway", "nats-server", "nats-gateway", "marlin-gateway", *http_bench.TARGETS,
           "http-gateway")
TOOLS_ONLY = {"http-gateway"}  # measured by its tool alone, no client-library run
LOOPBACK = "127.0.0.1"
BATCH = 500


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
    parser.add_argument("--nats-bench-count", type=positive_int, default=200000, metavar="N",
                        help="messages per nats.js bench.js run (default 200000)")
    parser.add_argument("--single-client-requests", type=positive_int, default=20000, metavar="N",
                        help="requests per single-client run (redis-benchmark -c 1, HTTP POST; default 20000)")
    parser.add_argument("--tool-size", type=positive_int, default=64, metavar="BYTES",
                        help="payload size for redis-benchmark and the nats.js bench (default 64)")
    parser.add_argument("--gateway-workers", type=positive_int, default=1, metavar="N",
                        help="processes per gateway (gateway KIND --workers N; default 1)")
    parser.add_argument("--stages", action="store_true",
                        help="only time each pure stage of a gateway offline (us of CPU per message) and exit")
    parser.add_argument("--json", action="store_true", help="print the results as JSON instead of a table")


def run(args: argparse.Namespace) -> int:
    import asyncio

    import orjson

    if args.stages:
        from fyrehose.tools.bench import gateway_stages as bench_stages

        figures = bench_stages.stages()
        print(orjson.dumps(figures, option=orjson.OPT_INDENT_2).decode() if args.json else bench_stages.table(figures))
        return 0
    targets = [name.strip() for name in args.targets.split(",") if name.strip()]
    unknown = sorted(set(targets) - set(TARGETS))
    if unknown or not targets:
        raise InputError(f"unknown targets {', '.join(unknown) or '(none)'}; choose from {', '.join(TARGETS)}")
    tools = [tool for tool in bench_tools.TOOLS
             if (tool.server is None or tool.server in targets) and tool.gateway in targets]
    for tool in tools:  # before anything is started: a missing tool stops the bench with what to install
        tool.check()
    with tempfile.TemporaryDirectory(prefix="fyrehose-gateway-bench-") as scratch, Processes(Path(scratch)) as procs:
        addresses = procs.start(targets, args.gateway_workers)
        results: dict[str, list[float]] = {target: [] for target in targets if target not in TOOLS_ONLY}
        tool_runs: dict[str, dict[str, list[dict]]] = {
            tool.name: {target: [] for target in (tool.server, tool.gateway) if target is not None} for tool in tools}
        for number in range(args.runs):
            order = [target for target in targets if target not in TOOLS_ONLY]
            for target in order if number % 2 == 0 else order[::-1]:
                rate = asyncio.run(measure(target, addresses[target], args, f"bench.{number}.{target}"))
                results[target].append(rate)
                print(f"run {number + 1}/{args.runs} {target}: {rate:,.0f} msgs/s per subscriber",
                      file=sys.stderr, flush=True)
            for tool in tools:
                pair = list(tool_runs[tool.name]) if number % 2 == 0 else list(tool_runs[tool.name])[::-1]
                count = (args.single_client_requests if tool.single else
                         args.nats_bench_count if tool.server == "nats-server" else args.redis_benchmark_requests)
                for target in pair:
                    run = bench_tools.measure(tool, target, addresses[target], procs.pids.get(target), count,
                                              args.tool_size, args.timeout)
                    tool_runs[tool.name][target].append(run)
                    print(f"run {number + 1}/{args.runs} {tool.name} {target}: {run['rate']:,.0f} {tool.unit}",
                          file=sys.stderr, flush=True)
    report = {
        "machine": {"cores": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "messages": args.messages, "size": args.size, "subscribers": args.subscribers, "runs": args.runs,
        "gateway_workers": args.gateway_workers,
        "results": {target: {"median_msgs_per_s": statistics.median(rates),
                             "median_deliveries_per_s": statistics.median(rates) * args.subscribers,
                             "runs_msgs_per_s": rates}
                    for target, rates in results.items()},
    }
    if tools:
        report["tools"] = {"size": args.tool_size, "redis_benchmark_requests": args.redis_benchmark_requests,
                           "single_client_requests": args.single_client_requests,
                           "redis_benchmark_clients": bench_tools.REDIS_BENCHMARK_CLIENTS,
                           "nats_bench_count": args.nats_bench_count,
                           "results": {tool.name: bench_tools.summary(tool, tool_runs[tool.name]) for tool in tools}}
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
    tools = report.get("tools")
    if tools:
        lines.append(f"tools, {tools['size']}-byte payloads, {report['runs']} rounds, "
                     f"{report['gateway_workers']} process(es) per gateway:")
        lines.extend(bench_tools.table(tools["results"]))
    return "\n".join(lines)


# ---------------------------------------------------------------- the processes under test

@dataclass
class Processes:
    """Every process the benchmark starts; all are killed by PID on exit."""

    scratch: Path
    started: list[ChildProcess] = field(default_factory=list)
    pids: dict[str, int] = field(default_factory=dict)  # target -> its process, for its CPU seconds

    def __enter__(self) -> Processes:
        return self

    def __exit__(self, *exc: object) -> None:
        for process in self.started:
            process.kill()

    def start(self, targets: list[str], gateway_workers: int = 1) -> dict[str, tuple[str, int]]:
        addresses: dict[str, tuple[str, int]] = {}
        if "redis-server" in targets:
            port = free_port(socket.SOCK_STREAM)
            self.pids["redis-server"] = self._spawn([binary("redis-server"), "--port", str(port), "--bind", LOOPBACK,
                                                     "--save", "", "--appendonly", "no",
                                                     "--dir", str(self.scratch)]).pid
            addresses["redis-server"] = (LOOPBACK, port)
        if "nats-server" in targets:
            port = free_port(socket.SOCK_STREAM)
            self.pids["nats-server"] = self._spawn([binary("nats-server"), "-a", LOOPBACK, "-p", str(port)]).pid
            addresses["nats-server"] = (LOOPBACK, port)
        gateways = [target for target in targets if target.endswith("-gateway")]
        if gateways:
            backbone = f"{LOOPBACK}:{free_port(socket.SOCK_DGRAM)}"
            self._spawn(FYREHOSE + ["backbone", "--listen", backbone, "--workers", "0",
                                    "--state-dir", str(self.scratch / "backbone")]).wait_ready(30)
            for target in gateways:
                kind = http_bench.TARGETS.get(target, target.removesuffix("-gateway"))
                workers = ["--workers", str(gateway_workers)] if gateway_workers > 1 and kind in WORKER_KINDS else []
                process = self._spawn(FYREHOSE + ["gateway", kind, "--listen", f"{LOOPBACK}:0", "--backbone", backbone]
                                      + workers)
                addresses[target] = process.wait_ready(30 + 10 * gateway_workers)
                self.pids[target] = process.pid
        for target, address in addresses.items():
            wait_until(functools.partial(_accepts, address), 30,
                       f"{target} accepting connections on {address[0]}:{address[1]}", interval=0.1)
        return addresses

    def _spawn(self, command: list[str]) -> ChildProcess:
        process = ChildProcess(command, self.scratch / f"{Path(command[0]).name}-{len(self.started)}.log")
        self.started.append(process)
        return process


def _accepts(address: tuple[str, int]) -> bool:
    try:
        with socket.create_connection(address, timeout=1):
            return True
    except OSError:
        return False


# ---------------------------------------------------------------- one measurement

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

    from fyrehose.gateways.marlin import protocol as proto

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
