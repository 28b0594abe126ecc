"""Throw random and mutated HTTP requests and WebSocket frames at a running ``fyrehose gateway http``.

    python -m fyrehose.tools.fuzz http [--inputs 1000000] [--connections 8] [--seed 1] [--json FILE]

Starts a private single-process backbone and an HTTP gateway on loopback,
then sends ``--inputs`` inputs, each on a connection of its own (sent, then
the sending side shut, then read until the gateway closes): mutations of
valid requests for every route, of a WebSocket upgrade followed by frames
(valid masked frames carrying RESP commands, and mutated ones), and random
bytes.  Meanwhile a RESP-over-WebSocket subscriber waits on ``fuzz.real``
and ``real-N`` messages are published over plain HTTP.  Afterwards:

- the gateway is still running and its memory is flat (at the end at most
  5 % + 8 MiB above the midpoint sample);
- the subscriber received every real message, ``/healthz`` answers 200, and
  the gateway logged no failed connection (a traceback).

Exit status 0 when the gateway passed.
"""
from __future__ import annotations

import argparse
import http.client
import socket
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, BytesMessage, Request
from wsproto.frame_protocol import FrameProtocol

from fyrehose.runtime.process import FYREHOSE, ChildProcess
from fyrehose.runtime.readiness import free_port
from fyrehose.tools.fuzz.backbone import FLAT_SLACK, conclude
from fyrehose.tools.fuzz.mutation import mutation_inputs

LOOPBACK = "127.0.0.1"
SUBJECT = "fuzz.real"
REAL_EVERY = 5000  # inputs between two real publishes
READ_TIMEOUT = 5.0  # seconds one input's connection may stay open after it was sent
UPGRADE = (b"GET /resp HTTP/1.1\r\nHost: fuzz\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
           b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")


def masked(payload: bytes) -> bytearray:
    """A valid client frame carrying ``payload`` (masked, as RFC 6455 requires of clients)."""
    return FrameProtocol(client=True, extensions=[]).send_data(payload, fin=True)


SEEDS = [
    b"GET /healthz HTTP/1.1\r\nHost: a\r\n\r\nGET /metrics HTTP/1.1\r\nHost: a\r\n\r\n",
    b"POST /v1/publish/fuzz.noise HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello",
    b"POST /v1/publish/fuzz.noise HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
    b"GET /v1/stream/fuzz.%3E HTTP/1.1\r\nHost: a\r\nLast-Event-ID: 1\r\n\r\n",
    b"GET /v1/last/fuzz.noise HTTP/1.1\r\nHost: a\r\nIf-None-Match: \"x\"\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: a\r\n\r\nHEAD /live.js HTTP/1.1\r\nHost: a\r\n\r\n",
    UPGRADE + masked(b"*2\r\n$5\r\nHELLO\r\n$1\r\n3\r\nPSUBSCRIBE fuzz.*\r\nPUBLISH fuzz.noise x\r\n"),
    UPGRADE + masked(b"SUBSCRIBE fuzz.noise\r\nPING\r\nQUIT\r\n"),
    UPGRADE + b"\x89\x80\x00\x00\x00\x00\x88\x82\x00\x00\x00\x00\x03\xe8",
    UPGRADE + b"\x01\x83\x00\x00\x00\x00abc\x80\x83\x00\x00\x00\x00def",
]


@dataclass
class HttpFuzzResult:
    inputs: int
    seconds: float
    real_published: int
    rss_start: int
    rss_middle: int = 0
    rss_end: int = 0
    alive: bool = False
    flat: bool = False
    real_seen: int = 0
    healthy: bool = False
    connection_failures: int = 0

    @property
    def passed(self) -> bool:
        return (self.alive and self.flat and self.healthy and self.real_seen == self.real_published
                and self.connection_failures == 0)


def send_input(port: int, data: bytes) -> None:
    """One input on a connection of its own: send it, shut the sending side, read until the gateway closes."""
    try:
        with socket.create_connection((LOOPBACK, port), timeout=READ_TIMEOUT) as sock:
            try:
                sock.sendall(data)
                sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass  # the gateway may close early (a bad request line): what it sent is still read
            deadline = time.monotonic() + READ_TIMEOUT
            while time.monotonic() < deadline and sock.recv(65536):
                pass
    except OSError:
        pass  # reset or timed out: the gateway's liveness is judged separately


class Subscriber:
    """A RESP-over-WebSocket subscriber of ``fuzz.real`` (wsproto's client state machine)."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection((LOOPBACK, port), timeout=10)
        self.ws = WSConnection(ConnectionType.CLIENT)
        self.sock.sendall(self.ws.send(Request(host=f"{LOOPBACK}:{port}", target="/resp")))
        self.messages: list[bytes] = []
        self._read_until(lambda: self.accepted)
        self.sock.sendall(self.ws.send(BytesMessage(data=b"SUBSCRIBE " + SUBJECT.encode() + b"\r\n")))
        self._read_until(lambda: self.messages)

    accepted = False

    def _read_until(self, condition, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while not condition() and time.monotonic() < deadline:
            self.sock.settimeout(max(0.05, deadline - time.monotonic()))
            try:
                data = self.sock.recv(1 << 20)
            except TimeoutError:
                return
            if not data:
                return
            self.ws.receive_data(data)
            for event in self.ws.events():
                if isinstance(event, AcceptConnection):
                    self.accepted = True
                elif isinstance(event, BytesMessage):
                    self.messages.append(bytes(event.data))

    def real_seen(self, real: list[bytes], timeout: float = 10.0) -> int:
        def seen() -> int:
            blob = b"".join(self.messages)
            return sum(1 for r in real if b"\r\n" + r + b"\r\n" in blob)

        self._read_until(lambda: seen() == len(real), timeout)
        return seen()


def publish(port: int, data: bytes) -> None:
    connection = http.client.HTTPConnection(LOOPBACK, port, timeout=10)
    try:
        connection.request("POST", f"/v1/publish/{SUBJECT}", body=data)
        response = connection.getresponse()
        response.read()
        if response.status != 200:
            raise RuntimeError(f"publishing a real message got HTTP {response.status}")
    finally:
        connection.close()


def healthy(port: int) -> bool:
    connection = http.client.HTTPConnection(LOOPBACK, port, timeout=10)
    try:
        connection.request("GET", "/healthz")
        return connection.getresponse().status == 200
    except OSError:
        return False
    finally:
        connection.close()


def fuzz_http(inputs: int, connections: int, seed: int, log=print) -> HttpFuzzResult:
    with tempfile.TemporaryDirectory(prefix="fyrehose-fuzz-http-") as tmp:
        workdir = Path(tmp)
        backbone_port, http_port = free_port(), free_port(socket.SOCK_STREAM)
        backbone = ChildProcess(FYREHOSE + ["backbone", "--listen", f"{LOOPBACK}:{backbone_port}", "--workers", "0",
                                            "--state-dir", str(workdir / "state")], workdir / "backbone.log")
        gateway = None
        try:
            backbone.wait_ready(30)
            gateway = ChildProcess(FYREHOSE + ["gateway", "http", "--listen", f"{LOOPBACK}:{http_port}",
                                               "--backbone", f"{LOOPBACK}:{backbone_port}", "--max-message", "65536"],
                                   workdir / "gateway.log")
            gateway.wait_ready(30)
            process = psutil.Process(gateway.pid)
            subscriber = Subscriber(http_port)
            result = HttpFuzzResult(inputs=inputs, seconds=0.0, real_published=0,
                                    rss_start=process.memory_info().rss)
            real: list[bytes] = []
            source = iter(mutation_inputs(SEEDS, inputs, seed))
            lock = threading.Lock()
            sent = [0]
            started = time.monotonic()

            def worker() -> None:
                while True:
                    with lock:
                        data = next(source, None)
                        if data is None:
                            return
                        sent[0] += 1
                        count = sent[0]
                    send_input(http_port, data)
                    if count == inputs // 2:
                        result.rss_middle = process.memory_info().rss
                    if count % REAL_EVERY == 0:
                        message = b"real-%d" % count
                        with lock:
                            real.append(message)
                        publish(http_port, message)

            threads = [threading.Thread(target=worker, daemon=True) for _ in range(connections)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            result.seconds = time.monotonic() - started
            message = b"real-final"
            real.append(message)
            publish(http_port, message)
            result.real_published = len(real)
            result.rss_end = process.memory_info().rss
            result.rss_middle = result.rss_middle or result.rss_end
            result.alive = gateway.alive()
            result.flat = result.rss_end <= result.rss_middle * 1.05 + FLAT_SLACK
            result.real_seen = subscriber.real_seen(real)
            result.healthy = healthy(http_port)
            result.connection_failures = gateway.output().count("Traceback")
            log(f"http: {inputs} inputs in {result.seconds:.1f} s ({inputs / max(result.seconds, 1e-9):.0f}/s); "
                f"RSS start {result.rss_start >> 20} MiB, middle {result.rss_middle >> 20} MiB, "
                f"end {result.rss_end >> 20} MiB (flat: {result.flat}); alive {result.alive}; "
                f"real messages {result.real_seen}/{result.real_published}; healthz {result.healthy}; "
                f"failed connections {result.connection_failures}; "
                f"{'PASSED' if result.passed else 'FAILED'}")
            return result
        finally:
            if gateway is not None:
                gateway.stop()
            backbone.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fyrehose.tools.fuzz http", description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--inputs", type=int, default=1_000_000, help="inputs sent (default 1000000)")
    parser.add_argument("--connections", type=int, default=8, help="inputs in flight at once (default 8)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", metavar="FILE", help="also write the result as JSON")
    args = parser.parse_args(argv)
    if args.inputs < 1 or args.connections < 1:
        parser.error("--inputs and --connections must be positive")
    return conclude([fuzz_http(args.inputs, args.connections, args.seed)], args.json)


if __name__ == "__main__":
    sys.exit(main())
