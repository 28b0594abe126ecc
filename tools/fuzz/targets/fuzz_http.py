"""Fuzz target: the HTTP gateway's connection (h11, then wsproto and RESP after an upgrade) never raises.

Each input drives one client's pure :class:`HttpConnection` in memory, fed in
two chunks at a split point the input chooses: as raw HTTP, as WebSocket
frames after a valid upgrade, as RESP inside valid masked frames, or as raw
HTTP to a gateway with ``--users`` (an anonymous user reading ``fuzz.>``; a
credential to verify is answered as wrong, without hashing); its requests are
answered at once, as a driver would (publishes confirmed, one cached record,
SSE streams routed).  Afterwards one message is routed through
the gateway to whatever the input subscribed to.  Oracles: nothing raises,
every response is HTTP/1.1, what is queued for the client never exceeds its
bound.
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import instrumented, main  # noqa: E402

with instrumented():
    from fyrehose.gateways.access.login import Access, Login
    from fyrehose.gateways.access.permissions import Permissions
    from fyrehose.gateways.access.users import Entry, User, UsersFile
    from fyrehose.gateways.drivers.http.gateway import HttpGateway, HttpSettings
    from fyrehose.gateways.drivers.http.stream import EventStream
    from fyrehose.gateways.http.connection import HttpConnection, Note, Stream
    from fyrehose.gateways.requests import Publish, Snapshot, Verify
    from fyrehose.subjects.envelope import Envelope, MsgType, Status
    from fyrehose.subjects.interest import LocalInterest
    from fyrehose.subjects.snapshots import sequence_headers

from wsproto.frame_protocol import FrameProtocol, Opcode  # noqa: E402

UPGRADE = (b"GET /resp HTTP/1.1\r\nHost: fuzz\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
           b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
MAX_PENDING = 1 << 16
USERS = UsersFile({"guest": Entry(User("guest", Permissions.of([]), Permissions.of(["fuzz.>"])))}, anonymous="guest")


class MemoryClient:
    """What the connection writes to (the interface of fyrehose.gateways.drivers.tcp.TcpClient), kept in memory."""

    peer = "fuzz:0"
    max_pending = MAX_PENDING

    def __init__(self) -> None:
        self.output: list[bytes] = []
        self.pending = 0
        self.closing: str | None = None
        self.connection: HttpConnection | None = None
        self.stream: EventStream | None = None

    def send(self, data: bytes) -> None:
        if self.closing is not None or not data:
            return
        if self.pending + len(data) > self.max_pending:
            self.slow_consumer("over the bound")
            return
        self.output.append(data)
        self.pending += len(data)

    def close(self, reason: str = "closed", farewell: bytes = b"") -> None:
        if self.closing is None:
            self.closing = reason
            self.output.append(farewell)

    def slow_consumer(self, detail: str) -> None:
        if self.closing is None:
            farewell = self.connection.farewell(detail) if self.connection else b""
            self.closing = detail
            self.output.append(farewell)


class MemoryRouter:
    """The router's public interface without a backbone: publishes are confirmed at once, a cache holds one record."""

    reachable = True

    def __init__(self) -> None:
        self.position = 0
        self.interest = LocalInterest("fuzz")

    def publish(self, payloads: list[bytes]) -> list[int]:
        first = self.position + 1
        self.position += len(payloads)
        return list(range(first, self.position + 1))

    def answer(self, connection: HttpConnection, client: MemoryClient) -> None:
        """Carry out the connection's requests, as its driver would, until it asks for nothing more."""
        while connection.requests:
            request = connection.requests.pop(0)
            if isinstance(request, Publish):
                connection.published(request.token, self.publish(request.payloads))
            elif isinstance(request, Snapshot):
                connection.answered(request.token, self.snapshot(request.subject, request.timeout))
            elif isinstance(request, Stream):
                client.stream = EventStream(client, connection.site, request.pattern,  # type: ignore[arg-type]
                                            connection.sse_data, request.login)
                client.stream.start(request.last_event_id)
            elif isinstance(request, Verify):
                connection.verified(request.token, None)  # every credential is wrong here: no scrypt per input
            else:
                assert isinstance(request, Note), request
            client.send(connection.outbox.take())

    def snapshot(self, subject: str, timeout: float) -> Envelope | None:
        if subject != "fuzz.cached":
            return None
        return Envelope(subject, b"cached", MsgType.INITIAL, Status.OK, headers=sequence_headers(7))

    def subscribers_elsewhere(self, subject: str) -> int:
        return 0


def masked(payload: bytes, opcode: Opcode = Opcode.BINARY) -> bytes:
    """A valid client frame (masked, as RFC 6455 requires) carrying ``payload``."""
    return FrameProtocol(client=True, extensions=[]).send_data(payload, fin=True) if opcode is Opcode.BINARY else b""


def drive(data: bytes) -> MemoryClient:
    mode, split = (data[0] % 4, data[1]) if len(data) >= 2 else (0, 0)
    body = data[2:]
    if mode == 1:
        body = UPGRADE + body
    elif mode == 2:
        body = UPGRADE + masked(body)
    gateway = HttpGateway(HttpSettings(backbone="127.0.0.1:1", max_message=4096, max_head=2048))
    router = MemoryRouter()
    gateway.router = router  # type: ignore[assignment]
    client = MemoryClient()
    login = Login(Access(USERS), "fuzz") if mode == 3 else None
    connection = client.connection = HttpConnection(gateway, router, 0.0, login)
    cut = split * len(body) // 256
    for chunk in (body[:cut], body[cut:]):
        if client.closing is None and chunk:
            connection.receive(chunk, 0.0)
            client.send(connection.outbox.take())
            router.answer(connection, client)
            if connection.outbox.closing is not None:
                client.close(connection.outbox.closing)
    gateway.route(router.position + 1, Envelope("fuzz.subject", b"routed"))
    client.send(connection.outbox.take())
    connection.closed()
    if client.stream is not None:
        client.stream.stop()
    return client


def check(data: bytes) -> None:
    client = drive(data)
    out = b"".join(client.output)
    assert not out or out.startswith(b"HTTP/1.1 "), out[:100]
    assert client.pending <= MAX_PENDING


SEEDS = [
    b"\x00\x80GET /healthz HTTP/1.1\r\nHost: a\r\n\r\n",
    b"\x00\x40POST /v1/publish/a.b HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello",
    b"\x00\x10POST /v1/publish/a.b HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
    b"\x00\x20GET /v1/stream/fuzz.%3E HTTP/1.1\r\nHost: a\r\nLast-Event-ID: 0\r\n\r\n",
    b"\x00\x20GET /v1/last/a.b HTTP/1.1\r\nHost: a\r\nIf-None-Match: \"x\"\r\n\r\nGET /metrics HTTP/1.1\r\nHost: a\r\n\r\n",
    b"\x01\x90" + masked(b"SUBSCRIBE fuzz.subject\r\n"),
    b"\x01\x90\x89\x80\x00\x00\x00\x00\x88\x82\x00\x00\x00\x00\x03\xe8",
    b"\x02\x10*2\r\n$5\r\nHELLO\r\n$1\r\n3\r\nPSUBSCRIBE fuzz.*\r\nPUBLISH fuzz.subject x\r\n",
    b"\x02\x10SUBSCRIBE fuzz.subject\r\nPING\r\nQUIT\r\n",
    b"\x00\x30GET /v1/last/fuzz.cached HTTP/1.1\r\nHost: a\r\nIf-None-Match: \"1\", W/\"7\"\r\n\r\n"
    b"GET /v1/last/fuzz.cached HTTP/1.1\r\nHost: a\r\n\r\n",
    b"\x03\x40GET /v1/stream/fuzz.%3E HTTP/1.1\r\nHost: a\r\n\r\n",
    b"\x03\x20POST /v1/publish/fuzz.x HTTP/1.1\r\nHost: a\r\nAuthorization: Basic YTpi\r\nContent-Length: 1\r\n\r\nx"
    b"GET /metrics HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer fh_0123456789abcdef_x\r\n\r\n",
    b"\x03\x90GET /resp?access_token=fh_0123456789abcdef_x HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\n"
    b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
]


if __name__ == "__main__":
    main(check, SEEDS)
