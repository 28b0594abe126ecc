"""Start-up helpers for the tools and tests that run local services on loopback.

The benches, the load test, the fuzzer and the test suite all start real
servers (backbones, gateways, journals, Redis, NATS) on 127.0.0.1: they need a
port that is free right now to start each one on, and they need to know when
a freshly started backbone answers before they use it.  These helpers are the
one definition of both, instead of a copy in each tool.
"""
from __future__ import annotations

import os
import random
import re
import socket
import time

from fyrehose.net.addresses import resolve_ipv4
from fyrehose.protocol import codec
from fyrehose.protocol.connection import BackboneConnection

LOOPBACK = "127.0.0.1"
_PROBE_FLAGS = codec.FLAG_NOSUBSCRIBE | codec.FLAG_NOJOURNAL  # a probe neither subscribes nor asks the journal


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


def _probe(sock: socket.socket, connection: BackboneConnection, wait: float) -> bool:
    """Send the connection's next KEEPALIVE from ``sock``; True when an ACK to one of its tokens arrives in time.

    The answer is judged by the client's own protocol state
    (:class:`~fyrehose.protocol.connection.BackboneConnection`): only the backbone's
    address, only our tokens.
    """
    deadline = time.monotonic() + wait
    try:
        now = time.monotonic()
        datagrams, _ = connection.poll(max(now, connection.next_deadline()))
        for datagram in datagrams:
            sock.sendto(datagram, connection.backbone)
        while (left := deadline - time.monotonic()) > 0:
            sock.settimeout(left)
            data, source = sock.recvfrom(codec.MAX_DATAGRAM)
            if connection.receive(data, source, time.monotonic()).acked:
                return True
    except (TimeoutError, ConnectionError):  # no answer in time (socket.timeout); an ICMP port unreachable
        pass
    return False


def _probe_connection(addr: tuple[str, int]) -> BackboneConnection:
    host, port = addr
    return BackboneConnection((resolve_ipv4(host), port), flags=_PROBE_FLAGS, keepalive_interval=0.1)


def keepalive_answered(addr: tuple[str, int], wait: float = 0.1) -> bool:
    """Whether the backbone at ``addr`` answers one KEEPALIVE, sent from a fresh UDP socket, within ``wait`` s."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        return _probe(sock, _probe_connection(addr), wait)


def wait_for_backbone(addr: tuple[str, int], timeout: float = 10.0) -> None:
    """Block until the backbone at ``addr`` answers a KEEPALIVE; ``TimeoutError`` after ``timeout`` seconds.

    Every attempt goes from one socket, so the backbone sees a single client
    (one slot of ``--max-clients``) however many attempts it takes, and an ACK
    to an earlier attempt's token that comes after it gave up still counts.
    """
    deadline = time.monotonic() + timeout
    connection = _probe_connection(addr)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        while (left := deadline - time.monotonic()) > 0:
            attempt = min(0.1, left)
            ends = time.monotonic() + attempt
            if _probe(sock, connection, attempt):
                return
            time.sleep(max(0.0, ends - time.monotonic()))  # no busy loop when an attempt fails at once
    host, port = addr
    raise TimeoutError(f"backbone at {host}:{port} did not answer within {timeout:g} s")


READY_LINE = re.compile(r"fyrehose (?P<kind>[a-z][a-z ]*?) listening on (?P<host>[^\s:]+):(?P<port>\d+)\b")


def announce_ready(kind: str, address: tuple[str, int], details: str = "") -> None:
    """Print the one readiness line every long-running command prints, on stdout, once it serves.

    ``fyrehose KIND listening on HOST:PORT (details)``: scripts and
    supervisors wait for this line (see :data:`READY_LINE`) instead of each
    command's own wording.
    """
    host, port = address[0], address[1]
    print(f"fyrehose {kind} listening on {host}:{port}" + (f" ({details})" if details else ""), flush=True)
