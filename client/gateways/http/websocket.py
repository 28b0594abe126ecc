"""WebSocket (RFC 6455) on an upgraded HTTP connection, and RESP carried over it; pure.

:class:`WebSocketEndpoint` runs wsproto's state machine between the client's
bytes and a handler of whole messages: it answers pings, completes the
closing handshake, closes with 1009 a message over ``max_message`` bytes
(before buffering more of it) and with wsproto's own code (1002, 1007) a
malformed frame.  What it sends goes into the connection's
:class:`~fyrehose.gateways.outbox.Outbox`, in order.

:class:`RespOverWebSocket` is that outbox's framing for a
:class:`~fyrehose.gateways.redis.connection.RedisConnection` writing into it:
every RESP value the Redis connection replies becomes one binary message,
so a browser handles one reply or push per ``onmessage``, and its orderly
close (``QUIT``, a malformed RESP stream) becomes a close frame.  With
``seq`` on, each pub/sub message pushed by the stream is preceded, inside
the same WebSocket message, by a RESP3 attribute ``|1 +seq :N`` holding its
backbone sequence (the live view shows it; RESP3 clients skip attributes
they do not know).

A client that stops reading is the driver's to notice: its unread output
would pass ``max_pending`` (less :data:`CLOSE_HEADROOM`, kept for the close
frame); the connection's farewell is then a 1008 close queued behind what
the client has not read yet, so a client that reads again within its close
grace period receives everything up to the close and learns why.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from wsproto.connection import Connection as WsConnection
from wsproto.connection import ConnectionState
from wsproto.events import BytesMessage, CloseConnection, Message, Ping, TextMessage

from fyrehose.gateways.http.resp_values import split_values
from fyrehose.gateways.outbox import Outbox

NORMAL, PROTOCOL_ERROR, POLICY_VIOLATION, MESSAGE_TOO_BIG = 1000, 1002, 1008, 1009
MAX_REASON = 120  # a close frame's payload is at most 125 bytes: the code and a short reason
UNSENDABLE = frozenset({1005, 1006, 1015})  # codes that report, never travel (RFC 6455 7.4.1)
CLOSE_HEADROOM = 256  # output kept free below --max-pending for the 1008 close frame

MessageHandler = Callable[[bytes], None]


class StreamMark:
    """The sequence of the message being routed right now (0 outside routing).

    Routing pushes only stream messages, so whatever a connection pushes while
    the mark is set is that message, never a command's reply.
    """

    seq = 0


class RespOverWebSocket:
    """The outbox framing of a Redis connection over a WebSocket: one binary message per RESP value."""

    def __init__(self, ws: WsConnection, mark: StreamMark, *, with_seq: bool = False) -> None:
        self.ws = ws
        self.mark = mark
        self.with_seq = with_seq  # the client asked for each message's sequence
        self.ending: tuple[int, str] | None = None  # the endpoint's close code and reason (else RESP's own close)

    def reply(self, data: bytes) -> bytes:
        return b"".join(self._message(value) for value in split_values(data))

    def push(self, data: bytes) -> bytes:
        seq = self.mark.seq
        if seq and self.with_seq:
            data = b"|1\r\n+seq\r\n:%d\r\n" % seq + data
        return self._message(data)

    def close(self, reason: str) -> bytes:
        code, reason = self.ending or (NORMAL if reason == "QUIT" else PROTOCOL_ERROR, reason)
        if self.ws.state not in (ConnectionState.OPEN, ConnectionState.REMOTE_CLOSING):
            return b""
        # a close without a status (1005) is answered by a close without one: no code, no reason
        return self.ws.send(CloseConnection(code=code, reason=_short(reason) if code not in UNSENDABLE else ""))

    def _message(self, value: bytes) -> bytes:
        if self.ws.state is not ConnectionState.OPEN:
            return b""
        return self.ws.send(BytesMessage(data=value))


class WebSocketEndpoint:
    """One WebSocket connection's input: whole messages to ``on_message``; its control frames into ``outbox``."""

    def __init__(self, outbox: Outbox, framing: RespOverWebSocket, *, max_message: int, stats: Counter) -> None:
        self.outbox = outbox
        self.framing = framing
        self.max_message = max_message
        self.stats = stats
        self.on_message: MessageHandler = lambda data: None
        self._ws = framing.ws
        self._parts: list[bytes] = []
        self._size = 0

    def held(self) -> int:
        """Bytes of the message being received (bounded by --max-message)."""
        return self._size

    @property
    def open(self) -> bool:
        return self._ws.state is ConnectionState.OPEN and self.outbox.closing is None

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
                self.outbox.raw(self._ws.send(event.response()))
            elif isinstance(event, CloseConnection):
                if event.code == PROTOCOL_ERROR or event.code == 1007:
                    self.stats["websocket protocol errors"] += 1
                self.close(event.code, event.reason or "closed by the client")
                return

    def close(self, code: int, reason: str) -> None:
        """Send our close frame (or answer theirs) after the replies before it, then hang up."""
        reason = _short(reason)
        if self.outbox.closing is None and self.framing.ending is None:
            self.framing.ending = (code, reason)
        self.outbox.close(f"websocket closed {code}: {reason}")

    def farewell(self, reason: str) -> bytes:
        """The close frame for a client disconnected as a slow consumer."""
        if self._ws.state is not ConnectionState.OPEN:
            return b""
        return self._ws.send(CloseConnection(code=POLICY_VIOLATION, reason=_short(reason)))


def _short(reason: str) -> str:
    raw = reason.encode()[:MAX_REASON]
    return raw.decode("utf-8", "ignore")
