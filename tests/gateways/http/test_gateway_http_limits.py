"""The HTTP gateway against bad and hostile input: limits, malformed HTTP and frames, slow readers, TLS.

Every case ends with the gateway still serving (``/healthz``).
"""
from __future__ import annotations

import socket
import ssl
import subprocess
import time

import psutil
import pytest
import websockets.sync.client
from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, BytesMessage, CloseConnection, Request

from fyrehose import Client

from gateway_support import GatewayProcess
from support import EVENT_WITHIN, FYREHOSE, LOOPBACK, wait_until


@pytest.fixture(scope="module")
def small_gateway(module_backbone, tmp_path_factory):
    """A gateway with small limits, so that crossing them is cheap."""
    process = GatewayProcess("http", module_backbone.address, tmp_path_factory.mktemp("http-limits"),
                             ["--max-message", "4096", "--max-header", "2048", "--max-pending", str(256 << 10)]).start()
    yield process
    process.kill()


def exchange(port: int, data: bytes, timeout: float = 10.0) -> bytes:
    """Send ``data`` and read until the gateway closes the connection."""
    with socket.create_connection((LOOPBACK, port), timeout=timeout) as sock:
        sock.sendall(data)
        out = b""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                chunk = sock.recv(65536)
            except (ConnectionResetError, TimeoutError):
                break
            if not chunk:
                break
            out += chunk
        return out


def still_serving(gateway: GatewayProcess) -> None:
    assert gateway.alive()
    reply = exchange(gateway.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 200 OK\r\n"), reply


def test_headers_over_the_limit_are_431(small_gateway):
    reply = exchange(small_gateway.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 4000 + b"\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 431 "), reply
    reply = exchange(small_gateway.port, b"GET /" + b"a" * 4000 + b" HTTP/1.1\r\nHost: x\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 431 "), reply
    still_serving(small_gateway)


@pytest.mark.parametrize("request_bytes", [
    b"NOT HTTP AT ALL\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n",
    b"POST /v1/publish/a HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n",
    b"POST /v1/publish/a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    b"GET / HTTP/1.1\r\n\r\n",  # HTTP/1.1 without Host
    b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",  # a TLS hello on the plain port
])
def test_malformed_http_is_400_and_a_close(small_gateway, request_bytes):
    reply = exchange(small_gateway.port, request_bytes)
    assert reply.startswith(b"HTTP/1.1 400 ") and b"connection: close\r\n" in reply, reply
    still_serving(small_gateway)


def test_slow_and_idle_clients_are_timed_out(module_backbone, tmp_path):
    gateway = GatewayProcess("http", module_backbone.address, tmp_path, ["--idle-timeout", "1"]).start()
    try:
        partial = exchange(gateway.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n", timeout=20)
        assert partial.startswith(b"HTTP/1.1 408 ") and b"connection: close\r\n" in partial, partial
        slow_body = exchange(gateway.port, b"POST /v1/publish/a.b HTTP/1.1\r\nHost: x\r\nContent-Length: 9\r\n\r\nabc",
                             timeout=20)
        assert slow_body.startswith(b"HTTP/1.1 408 "), slow_body
        kept_alive = exchange(gateway.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", timeout=20)
        assert kept_alive.startswith(b"HTTP/1.1 200 OK\r\n") and kept_alive.endswith(b"ok\n")  # then a quiet close
        with socket.create_connection(gateway.address, timeout=20) as silent:
            assert silent.recv(100) == b""  # closed without a word
        still_serving(gateway)
    finally:
        gateway.stop()


def test_bodies_over_the_limit_are_413(small_gateway):
    reply = exchange(small_gateway.port, b"POST /v1/publish/a.b HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n")
    assert reply.startswith(b"HTTP/1.1 413 "), reply
    chunked = b"".join(b"400\r\n" + b"x" * 1024 + b"\r\n" for _ in range(5)) + b"0\r\n\r\n"
    reply = exchange(small_gateway.port,
                     b"POST /v1/publish/a.b HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked)
    assert reply.startswith(b"HTTP/1.1 413 "), reply
    still_serving(small_gateway)


def test_a_websocket_message_over_the_limit_closes_with_1009(small_gateway):
    with websockets.sync.client.connect(f"ws://{LOOPBACK}:{small_gateway.port}/resp", open_timeout=10) as ws:
        ws.send(b"PING\r\n")
        assert ws.recv(timeout=10) == b"+PONG\r\n"
        ws.send(b"PING " + b"x" * 5000 + b"\r\n")
        with pytest.raises(websockets.ConnectionClosedError) as closed:
            ws.recv(timeout=10)
    assert closed.value.rcvd.code == 1009
    still_serving(small_gateway)


class RawWebSocket:
    """A WebSocket client over a plain socket (wsproto's client state machine), for what libraries never send."""

    def __init__(self, port: int, receive_buffer: int | None = None) -> None:
        self.sock = socket.socket()
        if receive_buffer:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
        self.sock.settimeout(10)
        self.sock.connect((LOOPBACK, port))
        self.ws = WSConnection(ConnectionType.CLIENT)
        self.sock.sendall(self.ws.send(Request(host=f"{LOOPBACK}:{port}", target="/resp")))
        assert isinstance(self.next_event(), AcceptConnection)

    def next_event(self, timeout: float = 10.0):
        deadline = time.monotonic() + timeout
        while True:
            for event in self.ws.events():
                return event
            if time.monotonic() > deadline:
                return None
            try:
                data = self.sock.recv(1 << 20)
            except (TimeoutError, ConnectionResetError):
                return None
            self.ws.receive_data(data or None)
            if not data:
                events = list(self.ws.events())
                return events[0] if events else None

    def close_code(self, timeout: float = 20.0) -> int | None:
        """Read until the gateway's close frame; its code."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            event = self.next_event(max(0.1, deadline - time.monotonic()))
            if event is None:
                return None
            if isinstance(event, CloseConnection):
                return event.code
        return None


def test_malformed_frames_close_with_a_protocol_error(small_gateway):
    for frame in (b"\x81\x05hello",  # unmasked: clients must mask
                  b"\x83\x80\x00\x00\x00\x00",  # a reserved opcode
                  b"\xf1\x80\x00\x00\x00\x00",  # RSV bits without an extension
                  b"\x09\xfe\x10\x00\x00\x00\x00\x00"):  # a fragmented, oversized ping
        client = RawWebSocket(small_gateway.port)
        client.sock.sendall(frame)
        assert client.close_code() == 1002, frame
        client.sock.close()
    client = RawWebSocket(small_gateway.port)
    client.sock.sendall(client.ws.send(BytesMessage(data=b"*1\r\n$x\r\n")))  # malformed RESP
    event = client.next_event()
    assert isinstance(event, BytesMessage) and event.data.startswith(b"-ERR Protocol error")
    assert client.close_code() == 1002
    client.sock.close()
    still_serving(small_gateway)


def test_a_slow_reader_is_closed_with_1008(small_gateway, module_backbone):
    stalled = RawWebSocket(small_gateway.port, receive_buffer=4096)
    stalled.sock.sendall(stalled.ws.send(BytesMessage(data=b"SUBSCRIBE slow.ws\r\n")))
    with websockets.sync.client.connect(f"ws://{LOOPBACK}:{small_gateway.port}/resp", open_timeout=10) as healthy:
        healthy.send(b"SUBSCRIBE slow.ws\r\n")
        healthy.recv(timeout=10)
        time.sleep(0.3)  # both subscriptions are in place
        payload = b"x" * 20000
        with Client(module_backbone.address, subscribe=False) as publisher:
            for _ in range(100):  # 20 MB (more than the kernel buffers) through a client that reads nothing
                publisher.publish_many([payload] * 10, subject="slow.ws")
                for _ in range(10):
                    assert healthy.recv(timeout=10).endswith(payload + b"\r\n")
                if "slow consumer" in small_gateway.log_text():
                    break
    assert wait_until(lambda: "slow consumer" in small_gateway.log_text(), timeout=EVENT_WITHIN), small_gateway.log_text()
    assert stalled.close_code() == 1008  # reading again: everything queued before the close, then the close
    stalled.sock.close()
    still_serving(small_gateway)


def test_a_slow_sse_reader_is_disconnected_and_the_others_keep_receiving(small_gateway, module_backbone):
    stalled = socket.socket()
    stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    stalled.settimeout(10)
    stalled.connect((LOOPBACK, small_gateway.port))
    stalled.sendall(b"GET /v1/stream/slow.sse HTTP/1.1\r\nHost: x\r\n\r\n")
    assert stalled.recv(4096).startswith(b"HTTP/1.1 200 OK\r\n")
    before = small_gateway.log_text().count("slow consumer")
    with websockets.sync.client.connect(f"ws://{LOOPBACK}:{small_gateway.port}/resp", open_timeout=10) as healthy:
        healthy.send(b"SUBSCRIBE slow.sse\r\n")
        healthy.recv(timeout=10)
        payload = b"y" * 20000
        with Client(module_backbone.address, subscribe=False) as publisher:
            for _ in range(100):
                publisher.publish_many([payload] * 10, subject="slow.sse")
                for _ in range(10):
                    assert healthy.recv(timeout=10).endswith(payload + b"\r\n")
    assert wait_until(lambda: small_gateway.log_text().count("slow consumer") > before, timeout=EVENT_WITHIN)
    assert "Traceback" not in small_gateway.log_text() and "route" not in small_gateway.log_text()
    stalled.close()
    still_serving(small_gateway)


def test_tls_serves_https_and_wss(module_backbone, tmp_path):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
                    "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True, timeout=60)
    gateway = GatewayProcess("http", module_backbone.address, tmp_path,
                             ["--tls-cert", str(cert), "--tls-key", str(key)]).start()
    try:
        url = f"https://{LOOPBACK}:{gateway.port}"
        result = subprocess.run(["curl", "-s", "--cacert", str(cert), "--max-time", "10", f"{url}/healthz"],
                                capture_output=True, timeout=20)
        assert result.stdout == b"ok\n", result
        context = ssl.create_default_context(cafile=str(cert))
        with websockets.sync.client.connect(f"wss://{LOOPBACK}:{gateway.port}/resp", ssl=context,
                                            origin=websockets.Origin(url), open_timeout=10) as ws:
            ws.send(b"PING\r\n")
            assert ws.recv(timeout=10) == b"+PONG\r\n"
        assert exchange(gateway.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", timeout=5) == b""  # plain: no answer
        result = subprocess.run(["curl", "-s", "--cacert", str(cert), "--max-time", "10", f"{url}/healthz"],
                                capture_output=True, timeout=20)
        assert result.stdout == b"ok\n" and gateway.alive()
        assert psutil.Process(gateway.child.pid).num_threads() == 1  # gevent's own SSL sockets: nothing patched
    finally:
        gateway.stop()


@pytest.mark.parametrize("args, message", [
    (["--tls-cert", "/nonexistent.pem"], "--tls-cert and --tls-key go together"),
    (["--tls-cert", "/nonexistent.pem", "--tls-key", "/nonexistent.key"], "cannot load TLS certificate"),
    (["--max-message", "0"], "--max-message"),
])
def test_bad_options_are_one_line_errors(args, message):
    result = subprocess.run(FYREHOSE + ["gateway", "http", "--listen", f"{LOOPBACK}:0", *args],
                            capture_output=True, text=True, timeout=30)
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.stderr
