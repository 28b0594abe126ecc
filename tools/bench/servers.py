"""The servers under test: started by the bench on loopback, stopped by PID, installed from the OS packages when missing.

Each step of a run gets a fresh server, so no step inherits another's
subscribers (a fyrehose backbone keeps delivering to a subscriber for 5 s
after its last KEEPALIVE), buffers or memory.
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import psutil

from fyrehose.backbone.multiprocess.supervisor import default_sizes
from fyrehose.drivers.backbone_io import keepalive_answered
from fyrehose.protocol.codec import Address
from fyrehose.runtime.process import ChildProcess, wait_until
from fyrehose.runtime.readiness import free_port
from fyrehose.tools.bench import wire
from fyrehose.tools.bench.loadgen import read_chunk, resp_request
from fyrehose.tools.bench.scanning import NatsStream, StreamError
from fyrehose.tools.bench.targets import FYREHOSE, NATS, REDIS, BenchError, Target

LOOPBACK = "127.0.0.1"
START_TIMEOUT = 20.0
STOP_TIMEOUT = 10.0
PACKAGES = {REDIS: ("redis-server", "redis-server"), NATS: ("nats-server", "nats-server")}  # protocol -> (binary, package)
_SEARCH_PATH = ("/usr/sbin", "/usr/bin", "/sbin", "/usr/local/sbin", "/usr/local/bin")

# Beyond these lines both servers run with their defaults.  Slow subscribers are
# never cut off: a subscriber that falls behind shows as lag, which the bench
# counts as loss when it exceeds the grace period (docs/benchmarks.md).
REDIS_CONFIG = """\
bind {host}
port {port}
daemonize no
save ""
appendonly no
dir {dir}
client-output-buffer-limit pubsub 0 0 0
"""
NATS_CONFIG = """\
listen: {host}:{port}
max_pending: 1073741824
write_deadline: "30s"
ping_interval: "10m"
"""


def locate(binary: str, package: str) -> str:
    """The path of ``binary``; installs ``package`` with apt-get first when it is missing."""
    search = os.pathsep.join([os.environ.get("PATH", ""), *_SEARCH_PATH])
    path = shutil.which(binary, path=search)
    if path:
        return path
    print(f"fyrehose bench: {binary} is missing: installing the OS package {package}", file=sys.stderr, flush=True)
    _apt_install(package)
    path = shutil.which(binary, path=search)
    if not path:
        raise BenchError(f"{binary} is still missing after installing {package}")
    return path


def _apt_install(package: str) -> None:
    if not shutil.which("apt-get"):
        raise BenchError(f"cannot install {package}: no apt-get here; install it with the system's package manager")
    prefix: list[str] = []
    if os.geteuid() != 0:
        if not shutil.which("sudo"):
            raise BenchError(f"cannot install {package}: not root and no sudo; run `apt-get install {package}` as root")
        prefix = ["sudo", "-n"]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = prefix + ["apt-get", "install", "-y", "-q", "--no-install-recommends", package]
    result = subprocess.run(install, capture_output=True, text=True, env=env, timeout=900)
    if result.returncode != 0:  # often a stale package list: refresh it once and retry
        subprocess.run(prefix + ["apt-get", "update", "-q"], capture_output=True, env=env, timeout=900)
        result = subprocess.run(install, capture_output=True, text=True, env=env, timeout=900)
    if result.returncode != 0:
        last = (result.stderr.strip() or result.stdout.strip()).splitlines()[-1:] or ["no output"]
        raise BenchError(f"apt-get install {package} failed: {last[0]}")


def version(path: str) -> str:
    result = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30)
    return (result.stdout.strip() or result.stderr.strip()).splitlines()[0]


class ServerProcess:
    """One server under test, as a subprocess with its own working directory and log."""

    def __init__(self, target: Target, command: list[str], address: Address, workdir: Path) -> None:
        self.target = target
        self.command = command
        self.address = address
        self.workdir = workdir
        self.log = workdir / "server.log"
        self.child: ChildProcess | None = None

    def start(self) -> ServerProcess:
        """Start it and wait until it answers its own protocol (redis-server and nats-server print no
        fyrehose readiness line, so every target is awaited the same way)."""
        self.child = ChildProcess(self.command, self.log, cwd=self.workdir)
        try:
            wait_until(self._answers, START_TIMEOUT, "the server's answer")
        except TimeoutError:
            self.stop()
            raise BenchError(f"the server did not answer within {START_TIMEOUT:.0f} s: {self.log_tail()}") from None
        return self

    def _answers(self) -> bool:
        """True once the server answers its own protocol; a server that exited ends the wait at once."""
        if not self.alive():
            raise BenchError(f"the server exited at start: {self.log_tail()}")
        try:
            _READY[self.target.protocol](self.address)
        except (OSError, StreamError):
            return False
        return True

    def alive(self) -> bool:
        return self.child is not None and self.child.alive()

    def log_tail(self) -> str:
        try:
            lines = self.log.read_text(errors="replace").strip().splitlines()
        except OSError:
            lines = []
        return lines[-1] if lines else "(no output)"

    def processes(self) -> dict[str, psutil.Process]:
        """The server's process and its children (a multi-process backbone has several), by name."""
        if self.child is None or not self.child.alive():
            return {}
        try:
            main = psutil.Process(self.child.pid)
            children = sorted(main.children(recursive=True), key=lambda child: child.pid)
        except psutil.Error:
            return {}
        found = {"server": main}
        for number, child in enumerate(children, 1):
            try:
                name = child.name()  # the multi-process backbone names its workers (fh-sequencer, ...)
            except psutil.Error:
                continue
            label = f"server/{name}"
            found[label if label not in found and name != main.name() else f"server-child-{number}"] = child
        return found

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it has not exited in time; always reaped."""
        if self.child is not None:
            self.child.stop(STOP_TIMEOUT)


def server_for(target: Target, binaries: dict[str, str], workdir: Path, workers: int | str,
               fanout: int | None, trace: Path | None = None, backbone_options: tuple[str, ...] = ()) -> ServerProcess:
    """A server for one step (not started), in a fresh directory under ``workdir``; a single-process backbone
    writes its stage trace into ``trace`` (a directory) when given, named after the step; a fyrehose backbone
    takes ``backbone_options`` too."""
    workdir.mkdir(parents=True)
    if target.gateway is not None:
        from fyrehose.tools.bench.gateway_stack import GatewayStack  # it builds on this module

        return GatewayStack(target, workdir)
    if target.protocol == FYREHOSE:
        port = free_port(socket.SOCK_DGRAM)
        if not target.multiprocess:
            workers = 0
        elif workers == "auto":  # the multi-process layout as it sizes itself, even where --workers auto picks one process
            workers = default_sizes()[0]
        command = [sys.executable, "-m", "fyrehose.commands.main", "backbone", "--listen", f"{LOOPBACK}:{port}",
                   "--workers", str(workers), "--state-dir", str(workdir / "state"), *backbone_options]
        if target.multiprocess and fanout is not None:
            command += ["--fanout", str(fanout)]
        if trace is not None and not workers:
            command += ["--trace", str(trace / f"{workdir.name}.trace"), "--trace-every", "1"]  # a tail needs them all
    elif target.protocol == REDIS:
        port = free_port(socket.SOCK_STREAM)
        config = workdir / "redis.conf"
        config.write_text(REDIS_CONFIG.format(host=LOOPBACK, port=port, dir=workdir))
        command = [binaries[REDIS], str(config)]
    else:
        port = free_port(socket.SOCK_STREAM)
        config = workdir / "nats.conf"
        config.write_text(NATS_CONFIG.format(host=LOOPBACK, port=port))
        command = [binaries[NATS], "-c", str(config)]
    return ServerProcess(target, command, (LOOPBACK, port), workdir)


# ---------------------------------------------------------------- readiness probes: raise OSError until ready


def _fyrehose_ready(address: Address) -> None:
    if not keepalive_answered(address, 0.2):
        raise TimeoutError(f"no KEEPALIVE-ACK from {address[0]}:{address[1]}")  # an OSError: not ready yet


def _redis_ready(address: Address) -> None:
    with socket.create_connection(address, timeout=1.0) as sock:
        answer = resp_request(sock, wire.resp_command(b"PING"))
        if answer != b"PONG":
            raise StreamError(f"unexpected answer to PING: {answer!r}")


def _nats_ready(address: Address) -> None:
    with socket.create_connection(address, timeout=1.0) as sock:
        sock.sendall(wire.NATS_CONNECT + wire.NATS_PING)
        stream = NatsStream(wire.MIN_PAYLOAD)
        while not stream.pongs:
            stream.feed(read_chunk(sock))


_READY = {FYREHOSE: _fyrehose_ready, REDIS: _redis_ready, NATS: _nats_ready}
