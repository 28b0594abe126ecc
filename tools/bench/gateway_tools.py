"""The tools Redis and NATS users already trust, pointed at a server and at its gateway in the same run.

``redis-benchmark`` (Debian redis-tools) runs ``PUBLISH`` with 50 clients at
pipeline 1 and at pipeline 16, and with one client waiting for each reply
(``-c 1 -P 1``: the latency of a single request); its own CSV gives
requests/s and the latency percentiles.  The HTTP gateway's single client is
a kept-alive connection sending ``POST /v1/publish/<subject>`` one at a time
and timing each response (there is no server to compare it with).  The npm ``nats`` package's own ``examples/bench.js --pub --sub``
(found where npm installed it: :mod:`fyrehose.tools.bench.npm_packages`) gives
the pub/sub messages/s it prints as ``pubsub``.  Each is run unmodified against the
server and against the gateway alternately, once per round, and the gateway
processes' CPU seconds during each run are divided by the messages it
carried: the CPU per message that the cost model in docs/gateways.md
projects from.
"""
from __future__ import annotations

import csv
import io
import json
import os
import shutil
import socket
import statistics
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass

import psutil

from fyrehose.errors import CommandFailed
from fyrehose.tools.bench import npm_packages

REDIS_BENCHMARK_CLIENTS = 50


@dataclass(frozen=True)
class ToolResult:
    rate: float  # the tool's own figure: requests/s or msgs/s
    messages: int  # messages the target carried (for CPU per message)
    p50_ms: float | None = None
    p99_ms: float | None = None


@dataclass(frozen=True)
class Tool:
    """One unmodified third-party benchmark, against a server and the gateway that stands in for it."""

    name: str
    server: str | None  # None: the gateway alone (no server speaks its protocol)
    gateway: str
    unit: str
    run: Callable[[tuple[str, int], int, int, float], ToolResult]  # (address, count, payload size, timeout)
    check: Callable[[], object]  # raises CommandFailed, saying what to install, when the tool is missing
    single: bool = False  # one client waiting for each reply: --single-client-requests requests


def binary(name: str) -> str:
    found = shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/bin:/sbin")
    if found is None:
        raise CommandFailed(f"{name} is not installed (Debian package {name}, see tools/test-packages.txt)")
    return found


def redis_benchmark(pipeline: int, clients: int = REDIS_BENCHMARK_CLIENTS,
                    ) -> Callable[[tuple[str, int], int, int, float], ToolResult]:
    def run(address: tuple[str, int], requests: int, size: int, timeout: float) -> ToolResult:
        host, port = address
        command = [binary("redis-benchmark"), "-h", host, "-p", str(port), "-n", str(requests),
                   "-c", str(clients), "-P", str(pipeline), "--csv",
                   "PUBLISH", "bench.redis-benchmark", "x" * size]
        result = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
        rows = list(csv.reader(io.StringIO(result.stdout)))
        if result.returncode != 0 or len(rows) < 2 or rows[0][:2] != ["test", "rps"]:
            raise CommandFailed(f"redis-benchmark failed (exit {result.returncode}): {result.stderr.strip()[-200:]}")
        row = dict(zip(rows[0], rows[1]))
        return ToolResult(float(row["rps"]), requests, _number(row.get("p50_latency_ms")),
                          _number(row.get("p99_latency_ms")))

    return run


def nats_bench(address: tuple[str, int], count: int, size: int, timeout: float) -> ToolResult:
    """nats.js's ``examples/bench.js --pub --sub``: its ``pubsub`` figure (published plus received msgs/s)."""
    node = npm_packages.node()
    node_modules = npm_packages.locate(npm_packages.NATS_BENCH)
    script = node_modules / npm_packages.NATS_BENCH.package / npm_packages.NATS_BENCH.path
    host, port = address
    command = [node, str(script), "--server", f"{host}:{port}", "--pub", "--sub", "--count", str(count),
               "--payload", str(size), "--json"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                            env=dict(os.environ, NODE_PATH=str(node_modules)))
    try:
        metrics = {metric["name"]: metric for metric in json.loads(result.stdout)}
        pubsub = metrics["pubsub"]
        return ToolResult(pubsub["msgs"] / (pubsub["duration"] / 1000), count)
    except (ValueError, KeyError, TypeError, ZeroDivisionError):
        raise CommandFailed(f"nats bench.js failed (exit {result.returncode}): "
                            f"{(result.stderr or result.stdout).strip()[-200:]}") from None


def nats_bench_check() -> None:
    npm_packages.node()
    npm_packages.locate(npm_packages.NATS_BENCH)


def http_publish(address: tuple[str, int], requests: int, size: int, timeout: float) -> ToolResult:
    """One kept-alive connection, ``POST /v1/publish/bench.http`` one at a time: requests/s, p50 and p99.

    Each latency runs from the request's write to its response's last byte,
    as this client (a plain socket, the response read by its Content-Length)
    sees it, its own few microseconds included.
    """
    body = b"x" * size
    request = b"POST /v1/publish/bench.http HTTP/1.1\r\nHost: bench\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    latencies: list[int] = []
    deadline = time.monotonic() + timeout
    with socket.create_connection(address, timeout=timeout) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        started = time.perf_counter()
        buffer = b""
        for _ in range(requests):
            sent = time.perf_counter_ns()
            sock.sendall(request)
            while (end := buffer.find(b"\r\n\r\n")) < 0 or len(buffer) < end + 4 + _content_length(buffer[:end]):
                chunk = sock.recv(65536)
                if not chunk or time.monotonic() > deadline:
                    raise CommandFailed(f"the HTTP gateway stopped answering: {buffer[:200]!r}")
                buffer += chunk
            latencies.append(time.perf_counter_ns() - sent)
            if not buffer.startswith(b"HTTP/1.1 200 "):
                raise CommandFailed(f"POST /v1/publish failed: {buffer[:200]!r}")
            buffer = buffer[end + 4 + _content_length(buffer[:end]):]
        elapsed = time.perf_counter() - started
    latencies.sort()
    return ToolResult(requests / elapsed, requests, latencies[len(latencies) // 2] / 1e6,
                      latencies[min(len(latencies) - 1, len(latencies) * 99 // 100)] / 1e6)


def _content_length(head: bytes) -> int:
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value)
    return 0


TOOLS = (
    Tool("redis-benchmark -P 1", "redis-server", "redis-gateway", "requests/s", redis_benchmark(1),
         lambda: binary("redis-benchmark")),
    Tool("redis-benchmark -P 16", "redis-server", "redis-gateway", "requests/s", redis_benchmark(16),
         lambda: binary("redis-benchmark")),
    Tool("redis-benchmark -c 1 -P 1", "redis-server", "redis-gateway", "requests/s", redis_benchmark(1, clients=1),
         lambda: binary("redis-benchmark"), single=True),
    Tool("nats.js bench --pub --sub", "nats-server", "nats-gateway", "msgs/s", nats_bench, nats_bench_check),
    Tool("HTTP POST /v1/publish, 1 client kept alive", None, "http-gateway", "requests/s", http_publish,
         lambda: None, single=True),
)


def process_cpu(pid: int) -> float:
    """CPU seconds of a process and its children (the workers of a multi-process gateway)."""
    try:
        process = psutil.Process(pid)
        processes = [process, *process.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0.0
    total = 0.0
    for each in processes:
        try:
            times = each.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
    return total


def measure(tool: Tool, target: str, address: tuple[str, int], pid: int | None, count: int, size: int,
            timeout: float) -> dict:
    """One run of ``tool`` against ``target``: its figure, and the CPU per message of the target when we started it."""
    before = process_cpu(pid) if pid is not None else 0.0
    result = tool.run(address, count, size, timeout)
    run: dict = {"rate": result.rate, "p50_ms": result.p50_ms, "p99_ms": result.p99_ms}
    if pid is not None:
        run["cpu_us_per_message"] = (process_cpu(pid) - before) / result.messages * 1e6
    return run


def summary(tool: Tool, runs: dict[str, list[dict]]) -> dict:
    """min/median/max of each target's figure, and of the per-round ratio gateway/server."""
    section: dict = {"unit": tool.unit, "targets": {}}
    for target, target_runs in runs.items():
        section["targets"][target] = {
            "rate": _spread([run["rate"] for run in target_runs]),
            "p50_ms": _spread([run["p50_ms"] for run in target_runs if run["p50_ms"] is not None]),
            "p99_ms": _spread([run["p99_ms"] for run in target_runs if run["p99_ms"] is not None]),
            "cpu_us_per_message": _spread([run["cpu_us_per_message"] for run in target_runs
                                           if "cpu_us_per_message" in run]),
            "runs": target_runs,
        }
    if tool.server is not None and tool.server in runs and tool.gateway in runs:
        section["ratio_gateway_to_server"] = _spread(
            [gateway["rate"] / server["rate"] for gateway, server in zip(runs[tool.gateway], runs[tool.server])])
    return section


def table(sections: dict[str, dict]) -> list[str]:
    lines = []
    for name, section in sections.items():
        lines.append(f"{name} ({section['unit']}; min / median / max over rounds)")
        for target, result in section["targets"].items():
            rate = result["rate"]
            line = f"  {target:<15}{rate['min']:>13,.0f}{rate['median']:>13,.0f}{rate['max']:>13,.0f}"
            if result["p50_ms"]:
                line += f"   p50 {result['p50_ms']['median']:.2f} ms  p99 {result['p99_ms']['median']:.2f} ms"
            if result["cpu_us_per_message"]:
                line += f"   {result['cpu_us_per_message']['median']:.1f} us CPU/msg"
            lines.append(line)
        ratio = section.get("ratio_gateway_to_server")
        if ratio:
            lines.append(f"  gateway/server {ratio['min']:>9.3f}{ratio['median']:>13.3f}{ratio['max']:>13.3f}")
    return lines


def _spread(values: list[float]) -> dict | None:
    if not values:
        return None
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def _number(text: str | None) -> float | None:
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None
