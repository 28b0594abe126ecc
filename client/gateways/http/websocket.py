"""WebSocket (RFC 6455) on an upgraded HTTP connection, and RESP carried over it.

:class:`WebSocketEndpoint` drives wsproto's state machine between the
client's socket (the gateway's bounded :class:`~fyrehose.gateways.tcp.TcpClient`)
and a handler of whole messages: it answers pings, completes the closing
handshake, closes with 1009 a message over ``max_message`` bytes (before
buffering more of it) and with wsproto's own code (1002, 1007) a malformed
frame.  A client that stops reading is closed with 1008 once its unread
output would pass ``max_pending``: the close frame is queued behind what the
client has not read yet (a little room is kept for it), so a client that
reads again within its close grace period receives everything
up to the close and learns why; one that never does is hung up on.

:class:`RespMessages` is what a :class:`~fyrehose.gateways.redis.connection.RedisConnection`
writes to instead of a :class:`~fyrehose.gateways.tcp.TcpClient`: every RESP
value that connection sends becomes one binary message, so a browser handles
one reply or push per ``onmessage``.  With ``seq`` on, each pub/sub message pushed by the stream is
preceded, inside the same WebSocket message, by a RESP3 attribute
``|1 +seq :N`` holding its backbone sequence (the live view shows it; RESP3
clients skip attributes they do not know).
"""
from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING

from wsproto.connection import Connection as WsConnection
from wsproto.connection import ConnectionState, ConnectionType
from wsproto.events import BytesMessage, CloseConnection, Message, Ping, TextMessage

from fyrehose.gateways.http.resp_values import split_values

if TYPE_CHECKING:
    from fyrehose.gateways.tcp import TcpClient

log = logging.getLogger("fyrehose.gateway")

NORMAL, PROTOCOL_ERROR, POLICY_VIOLATION, MESSAGE_TOO_BIG = 1000, 1002, 1008, 1009
MAX_REASON = 120  # a close frame's payload is at most 125 bytes: the code and a short reason
UNSENDABLE = frozenset({1005, 1006, 1015})  # codes that report, never travel (RFC 6455 7.4.1)
CLOSE_HEADROOM = 256  # output kept free below --max-pending for the 1008 close frame

MessageHandler = Callable[[bytes], None]


class StreamMark:
    """The sequence of the message being routed right now (0 outside routing).

    Routing never yields to another greenlet, so whatever a connection sends
    while the mark is set is that message's push, never a command's reply.
    """

    seq = 0


class WebSocketEndpoint:
    """One WebSocket connection: whole messages to ``on_message``, messages out through the client's bounded output."""

    def __init__(self, client: TcpClient, *, max_message: int, stats: Counter) -> None:
        self.client = client
        self.max_message = max_message
        self.stats = stats
        self.on_message: MessageHandler = lambda data: None
        self._ws = WsConnection(ConnectionType.SERVER)
        self._parts: list[bytes] = []
        self._size = 0

    def held(self) -> int:
        """Bytes of the message being received (bounded by --max-message)."""
        return self._size

    @property
    def open(self) -> bool:
        return self._ws.state is ConnectionState.OPEN

    def receive(self, data: bytes) -> None:
        if self._ws.state not in (ConnectionState.OPEN, ConnectionState.LOCAL_CLOSING):
            return
        self._ws.receive_data(data)
        for event in self._ws.events():
            if isinstance(event, Message):
                chunk = event.data.encode() if isinstance(event, TextMessage) else bytes(event.data)
                self._size += len(chunk)
                if self._size > self.max_message:
                    self.stats["websocket messages too big"] += 1
                    self.close(MESSAGE_TOO_BIG, f"message over {self.max_message} bytes")
                    return
                self._parts.append(chunk)
                if event.message_finished:
                    message = b"".join(self._parts)
                    self._parts, self._size = [], 0
                    self.stats["websocket messages received"] += 1
                    self.on_message(message)
                    if not self.open:
                        return
            elif isinstance(event, Ping):
                self.client.send(self._ws.send(event.response()))
            elif isinstance(event, CloseConnection):
                if event.code == PROTOCOL_ERROR or event.code == 1007:
                    self.stats["websocket protocol errors"] += 1
                self.close(event.code, event.reason or "closed by the client")
                return

    def send(self, message: bytes) -> None:
        """Queue one binary message (dropped once the closing handshake began)."""
        if self._ws.state is not ConnectionState.OPEN:
            return
        frame = self._ws.send(BytesMessage(data=message))
        client = self.client
        if client.pending + len(frame) > client.max_pending - CLOSE_HEADROOM:
            self._slow_consumer(f"more than {client.max_pending - CLOSE_HEADROOM} bytes unread")
            return
        client.send(frame)

    def _slow_consumer(self, detail: str) -> None:
        """Close with 1008 behind what is queued: a client that reads again within the grace period hears why."""
        reason = f"slow consumer: {detail}"
        self.stats["slow consumers"] += 1
        log.warning("%s disconnected: %s", self.client.peer, reason)
        self.close(POLICY_VIOLATION, reason)

    def close(self, code: int, reason: str) -> None:
        """Send our close frame (or answer theirs) and hang up once it is written."""
        reason = _short(reason)
        if self._ws.state in (ConnectionState.OPEN, ConnectionState.REMOTE_CLOSING):
            # a close without a status (1005) is answered by a close without one: no code, no reason
            sent = CloseConnection(code=code, reason=reason if code not in UNSENDABLE else "")
            self.client.send(self._ws.send(sent))
        self.client.close(f"websocket closed {code}: {reason}")

    def farewell(self, reason: str) -> bytes:
        """The close frame for a client disconnected as a slow consumer."""
        if self._ws.state is not ConnectionState.OPEN:
            return b""
        return self._ws.send(CloseConnection(code=POLICY_VIOLATION, reason=_short(reason)))


class RespMessages:
    """A Redis connection's output over a WebSocket, in place of a TcpClient: one binary message per RESP value."""

    def __init__(self, endpoint: WebSocketEndpoint, mark: StreamMark, *, with_seq: bool = False) -> None:
        self.endpoint = endpoint
        self.peer = endpoint.client.peer
        self.mark = mark
        self.with_seq = with_seq  # the client asked for each message's sequence

    def send(self, data: bytes) -> None:
        seq = self.mark.seq
        if seq:  # sent while routing: exactly one push, nothing to cut
            self.endpoint.send(b"|1\r\n+seq\r\n:%d\r\n" % seq + data if self.with_seq else data)
            return
        for value in split_values(data):
            self.endpoint.send(value)

    def close(self, reason: str = "closed", farewell: bytes = b"") -> None:
        if farewell:
            self.endpoint.send(farewell)
        self.endpoint.close(NORMAL if reason == "QUIT" else PROTOCOL_ERROR, reason)


def _short(reason: str) -> str:
    raw = reason.encode()[:MAX_REASON]
    return raw.decode("utf-8", "ignore")
