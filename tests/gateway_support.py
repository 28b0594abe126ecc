"""Helpers for the gateway tests: gateway processes, and a Marlin client written from docs/gateways.md alone.

Not a test module of its own (it holds no tests); the gateway test modules
import from it.
"""
from __future__ import annotations

import os
import selectors
import socket
import struct
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest

from fyrehose.runtime.process import ChildProcess
from fyrehose.tools.fuzz.subscribers import raw_subscriber  # noqa: F401 - the gateway tests import it from here

from support import FYREHOSE, LOOPBACK, READY_WITHIN, BackboneProcess

KINDS = ("redis", "nats", "marlin")


class Deployment:
    """The router's state a pure connection reads (gateways.requests.Deployment): nobody subscribes elsewhere."""

    def __init__(self) -> None:
        from fyrehose.subjects.interest import LocalInterest

        self.interest = LocalInterest("test")
        self.position = 0

    def subscribers_elsewhere(self, subject: str) -> int:
        return 0


@dataclass
class GatewayProcess:
    """A ``fyrehose gateway KIND`` subprocess, found by its readiness line, stopped by its PID."""

    kind: str
    backbone: str
    log_dir: Path
    extra: list[str] = field(default_factory=list)
    port: int = 0
    child: ChildProcess | None = None
    log: Path | None = None

    def start(self) -> GatewayProcess:
        self.log = self.log_dir / f"gateway-{self.kind}-{os.getpid()}-{time.monotonic_ns()}.log"
        self.child = ChildProcess(FYREHOSE + ["gateway", self.kind, "--listen", f"{LOOPBACK}:0",
                                              "--backbone", self.backbone] + self.extra, self.log)
        _, self.port = self.child.wait_ready(READY_WITHIN)
        return self

    @property
    def address(self) -> tuple[str, int]:
        return LOOPBACK, self.port

    def log_text(self) -> str:
        return self.child.output() if self.child else ""

    output = log_text

    def alive(self) -> bool:
        return self.child is not None and self.child.alive()

    def rss(self) -> int:
        assert self.child is not None
        return psutil.Process(self.child.pid).memory_info().rss

    def stop(self, timeout: float = 20.0) -> int | None:
        """SIGTERM and wait: the clean shutdown (SIGKILL after ``timeout`` s)."""
        assert self.child is not None
        return self.child.stop(timeout)

    def kill(self) -> None:
        if self.child is not None:
            self.child.kill()


@pytest.fixture(scope="module")
def module_backbone(tmp_path_factory):
    """One backbone for all tests of a module (starting processes is what costs time)."""
    process = BackboneProcess(tmp_path_factory.mktemp("gateway-backbone") / "state").start()
    yield process
    process.kill()


@pytest.fixture
def gateway_factory(module_backbone, tmp_path):
    """Starts gateways of any kind with any options on the module's backbone: ``gateway_factory(kind, *options)``."""
    started: list[GatewayProcess] = []

    def start(kind: str, *extra: str) -> GatewayProcess:
        process = GatewayProcess(kind, module_backbone.address, tmp_path, list(extra)).start()
        started.append(process)
        return process

    yield start
    for process in started:
        process.kill()


@pytest.fixture(scope="module")
def gateways(module_backbone, tmp_path_factory):
    """A redis, a nats and a marlin gateway on the module's backbone, by kind."""
    log_dir = tmp_path_factory.mktemp("gateway-logs")
    started: dict[str, GatewayProcess] = {}
    try:
        for kind in KINDS:
            started[kind] = GatewayProcess(kind, module_backbone.address, log_dir).start()
        yield started
    finally:
        for process in started.values():
            process.kill()


# ---------------------------------------------------------------- a Marlin client from docs/gateways.md

# docs/gateways.md, "Marlin messages": every message is VERSION(1) TYPE(1) PAYLOAD; over TCP each
# message is preceded by its length as 4 bytes, big endian (docs/gateways.md, "Marlin over TCP").
M_SUBSCRIBE, M_UNSUBSCRIBE, M_RESPONSE, M_MESSAGE = 0, 1, 2, 3


def marlin_frame(kind: int, payload: bytes, version: int = 0) -> bytes:
    body = bytes((version, kind)) + payload
    return struct.pack(">I", len(body)) + body


def marlin_message(channel: bytes, data: bytes, message_id: int = 0) -> bytes:
    payload = struct.pack(">QQH", len(data), message_id, len(channel)) + channel + data
    return marlin_frame(M_MESSAGE, payload)


class MarlinClient:
    """A blocking Marlin client: send frames, read (kind, fields) tuples."""

    def __init__(self, address: tuple[str, int], timeout: float = 5.0) -> None:
        self.sock = socket.create_connection(address, timeout=timeout)
        self.buffer = bytearray()

    def close(self) -> None:
        self.sock.close()

    def subscribe(self, channel: bytes) -> None:
        self.sock.sendall(marlin_frame(M_SUBSCRIBE, channel))

    def unsubscribe(self, channel: bytes) -> None:
        self.sock.sendall(marlin_frame(M_UNSUBSCRIBE, channel))

    def publish(self, channel: bytes, data: bytes, message_id: int = 0) -> None:
        self.sock.sendall(marlin_message(channel, data, message_id))

    def read(self, timeout: float = 5.0):
        """The next message: ("response", ok, text) or ("message", id, channel, data); None on timeout/EOF."""
        deadline = time.monotonic() + timeout
        while True:
            if len(self.buffer) >= 4:
                (length,) = struct.unpack_from(">I", self.buffer)
                if len(self.buffer) >= 4 + length:
                    body = bytes(self.buffer[4:4 + length])
                    del self.buffer[:4 + length]
                    return _parse_marlin(body)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            self.sock.settimeout(remaining)
            try:
                chunk = self.sock.recv(65536)
            except TimeoutError:
                return None
            if not chunk:
                return None
            self.buffer += chunk


def _parse_marlin(body: bytes):
    assert body[0] == 0, f"version byte {body[0]}"
    if body[1] == M_RESPONSE:
        assert body[2] in (0, 1)
        return ("response", body[2] == 0, body[3:])
    assert body[1] == M_MESSAGE, f"unexpected type {body[1]}"
    data_length, message_id, channel_length = struct.unpack_from(">QQH", body, 2)
    channel = body[20:20 + channel_length]
    data = body[20 + channel_length:]
    assert len(data) == data_length
    return ("message", message_id, channel, data)


class RawNats:
    """The client protocol typed by hand, for what nats-py never sends."""

    def __init__(self, address) -> None:
        self.sock = socket.create_connection(address, timeout=5)
        self.data = b""
        self.info = self.line()
        assert self.info.startswith(b"INFO {")

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def line(self) -> bytes:
        while b"\r\n" not in self.data:
            chunk = self.sock.recv(65536)
            if not chunk:
                return b""
            self.data += chunk
        line, self.data = self.data.split(b"\r\n", 1)
        return line

    def until_closed(self) -> bytes:
        while True:
            try:
                chunk = self.sock.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            self.data += chunk
        return self.data


class SseReader:
    """``curl -N`` on a stream URL, its output read as it arrives."""

    def __init__(self, url: str, *headers: str) -> None:
        args = ["curl", "-s", "-N", "--max-time", "60"]
        for header in headers:
            args += ["-H", header]
        self.proc = subprocess.Popen(args + [url], stdout=subprocess.PIPE)
        self.data = b""

    def read_until(self, needle: bytes, timeout: float = 15.0) -> bytes:
        selector = selectors.DefaultSelector()
        selector.register(self.proc.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + timeout
        while needle not in self.data and time.monotonic() < deadline:
            if selector.select(timeout=max(0.0, deadline - time.monotonic())):
                chunk = self.proc.stdout.read1(65536)
                if not chunk:
                    break
                self.data += chunk
        selector.close()
        assert needle in self.data, f"{needle!r} not in the stream: {self.data!r}"
        return self.data

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait(10)
