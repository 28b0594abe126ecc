"""Start-up helpers for the tools and tests that run local services on loopback.

The benches, the load test, the fuzzer and the test suite all start real
servers (backbones, gateways, journals, Redis, NATS) on 127.0.0.1: they need a
port that is free right now to start each one on, and every long-running
command says the same line once it serves.  These helpers are the one
definition of both, instead of a copy in each tool.  Whether a freshly started
backbone answers is asked by a driver of the client's protocol state:
:func:`fyrehose.drivers.backbone_io.wait_for_backbone` and ``keepalive_answered``.
"""
from __future__ import annotations

import os
import random
import re
import socket

LOOPBACK = "127.0.0.1"
PORT_RANGE_VARIABLE = "FYREHOSE_TEST_PORTS"  # "LOW-HIGH": hand out ports from this range only (one per test worker)
_next_port: list[int] = []  # where this process goes on looking in that range


def free_port(kind: int = socket.SOCK_DGRAM) -> int:
    """A loopback port free right now for sockets of ``kind`` (``SOCK_DGRAM`` or ``SOCK_STREAM``).

    By default the kernel picks one.  Tests that run side by side give each
    worker its own range (``FYREHOSE_TEST_PORTS=LOW-HIGH``, below the
    kernel's ephemeral ports), so a port one worker probed cannot be handed to
    another worker's socket before the first one binds it.
    """
    span = os.environ.get(PORT_RANGE_VARIABLE)
    if not span:
        with socket.socket(socket.AF_INET, kind) as probe:
            probe.bind((LOOPBACK, 0))
            return probe.getsockname()[1]
    low, high = (int(bound) for bound in span.split("-"))
    if not _next_port:
        _next_port.append(random.randrange(low, high))  # a child process starts elsewhere than its parent
    for _ in range(high - low):
        port = _next_port[0]
        _next_port[0] = low + (port + 1 - low) % (high - low)
        with socket.socket(socket.AF_INET, kind) as probe:
            try:
                probe.bind((LOOPBACK, port))
            except OSError:
                continue
            return port
    raise OSError(f"no free port in {PORT_RANGE_VARIABLE}={span}")


READY_LINE = re.compile(r"fyrehose (?P<kind>[a-z][a-z ]*?) listening on (?P<host>[^\s:]+):(?P<port>\d+)\b")


def announce_ready(kind: str, address: tuple[str, int], details: str = "") -> None:
    """Print the one readiness line every long-running command prints, on stdout, once it serves.

    ``fyrehose KIND listening on HOST:PORT (details)``: scripts and
    supervisors wait for this line (see :data:`READY_LINE`) instead of each
    command's own wording.
    """
    host, port = address[0], address[1]
    print(f"fyrehose {kind} listening on {host}:{port}" + (f" ({details})" if details else ""), flush=True)
