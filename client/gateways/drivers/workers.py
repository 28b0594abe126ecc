"""``fyrehose gateway KIND --workers N``: N gateway processes sharing one TCP port with SO_REUSEPORT.

One gateway process is one gevent loop on one core.  With ``--workers N``
the command becomes a supervisor: it reserves the port (a bound socket that
never listens, so it takes no connections), starts N ordinary gateway
processes that each listen on it with SO_REUSEPORT (the kernel spreads new
connections over them), and prints its readiness line once all N printed
theirs.  Each worker is a whole gateway with its own backbone connection: it
routes the one backbone stream in sequence order, so every subscriber of
every worker sees the one order, and announces its own clients' interest,
so Redis receiver counts and NATS no-responders include the other workers'
clients as they include other gateways'.

The workers' log lines are relayed to the supervisor's stderr.  A worker
that exits on its own stops the others and makes the supervisor exit
non-zero (a supervisor of the command restarts the whole gateway); SIGTERM
or SIGINT stops every worker and exits 0 when all stopped cleanly.  A
worker outliving its supervisor (killed with SIGKILL) stops by itself once it
sees it was re-parented (:func:`fyrehose.gateways.drivers.runner.run_gateway`).
"""
from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import sys
import tempfile
import time
from pathlib import Path

from fyrehose.errors import CommandFailed
from fyrehose.gateways.drivers.users_file import load_users
from fyrehose.net.addresses import parse_hostport
from fyrehose.runtime.process import FYREHOSE, ChildProcess
from fyrehose.runtime.readiness import READY_LINE, announce_ready

# Kinds served by the common gevent runner, which can run as several processes on one port.
WORKER_KINDS = ("redis", "nats", "marlin")

log = logging.getLogger("fyrehose.gateway")

POLL = 0.2  # seconds between looks at the workers
READY_TIMEOUT = 60.0


def reuse_port_listener(host: str, port: int) -> socket.socket:
    """A listening TCP socket that shares ``port`` with the other workers (SO_REUSEPORT)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    sock.listen(1024)
    sock.setblocking(False)
    return sock


def worker_argv(argv: list[str], listen: str) -> list[str]:
    """The worker's command line: the supervisor's own, with the shared port, one process, SO_REUSEPORT.

    argparse keeps the last of repeated options, so appending overrides.
    """
    return FYREHOSE + argv + ["--listen", listen, "--workers", "1", "--reuse-port"]


class _LogRelay:
    """Copies what a worker writes to its log onto the supervisor's stderr, whole lines at a time.

    The workers' own readiness lines stay out: the supervisor's is the one that says the port serves.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0

    def relay(self) -> None:
        try:
            with open(self.path, "rb") as source:
                source.seek(self.offset)
                data = source.read()
        except FileNotFoundError:
            return
        end = data.rfind(b"\n") + 1
        if end:
            lines = [line for line in data[:end].splitlines(keepends=True)
                     if not READY_LINE.search(line.decode("utf-8", "replace"))]
            sys.stderr.buffer.write(b"".join(lines))
            sys.stderr.flush()
            self.offset += end


def run_workers(args: argparse.Namespace, kind: str) -> int:
    """Supervise ``args.workers`` gateway processes on one port until SIGTERM/SIGINT or a worker's death."""
    host, port = parse_hostport(args.listen)
    reserved = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    reserved.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    reserved.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        reserved.bind((host, port))
    except OSError as exc:
        raise CommandFailed(f"cannot bind {host}:{port}: {exc.strerror}") from None
    port = reserved.getsockname()[1]
    if args.users is not None:
        load_users(args.users)  # a bad file is one line here, not a worker that never gets ready
    stop: list[int] = []
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda number, frame: stop.append(number))
    workers: list[ChildProcess] = []
    signal.signal(signal.SIGHUP, lambda number, frame: _forward(workers, number))
    relays: list[_LogRelay] = []
    failed: str | None = None
    with tempfile.TemporaryDirectory(prefix=f"fyrehose-gateway-{kind}-") as logs:
        try:
            for number in range(args.workers):
                path = Path(logs) / f"worker-{number}.log"
                workers.append(ChildProcess(worker_argv(sys.argv[1:], f"{host}:{port}"), path))
                relays.append(_LogRelay(path))
            for worker in workers:
                worker.wait_ready(READY_TIMEOUT)
            for relay in relays:
                relay.relay()
            pids = ", ".join(str(worker.pid) for worker in workers)
            announce_ready(f"gateway {kind}", (host, port),
                           f"backbone {args.backbone}, {args.workers} workers: pids {pids}")
            failed = _supervise(workers, relays, stop)
        finally:
            statuses = [worker.stop() for worker in workers]
            for relay in relays:
                relay.relay()
            reserved.close()
    if failed is not None:
        raise CommandFailed(failed)
    if any(status not in (0, None) for status in statuses):
        raise CommandFailed(f"gateway workers exited with {statuses}")
    return 0


def _forward(workers: list[ChildProcess], signum: int) -> None:
    """SIGHUP (re-read the users file) goes to every worker."""
    for worker in workers:
        if worker.alive():
            os.kill(worker.pid, signum)


def _supervise(workers: list[ChildProcess], relays: list[_LogRelay], stop: list[int]) -> str | None:
    """Wait for a stop signal (None) or a worker's death (why, for the one error line)."""
    while not stop:
        for relay in relays:
            relay.relay()
        for number, worker in enumerate(workers):
            if not worker.alive():
                return (f"gateway worker {number} (pid {worker.pid}) exited with status "
                        f"{worker.proc.returncode}; the other workers were stopped")
        time.sleep(POLL)
    return None
