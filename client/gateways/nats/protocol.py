"""The NATS client protocol: an incremental parser for what clients send, and encoders for what they read.

Pure: bytes in, operations out.  The operations are those of the NATS client
protocol (docs.nats.io, "Client Protocol"): CONNECT, PUB, HPUB, SUB, UNSUB,
PING, PONG; names are case-insensitive, fields are separated by spaces or
tabs, lines end with CRLF.  Malformed input ends the stream with one
:class:`NatsError` carrying the text of the ``-ERR`` the server sends before
closing the connection, as nats-server does.
"""
from __future__ import annotations

from dataclasses import dataclass

import orjson

from fyrehose.gateways.incremental import IncrementalParser, Malformed
from fyrehose.gateways.nats.pub_scan import plain_pub

MAX_CONTROL_LINE = 4096  # nats-server's default max_control_line


@dataclass(frozen=True)
class Connect:
    options: dict


@dataclass(slots=True)  # one per message: a frozen dataclass would cost an object.__setattr__ per field
class Pub:
    subject: str
    reply: str | None
    payload: bytes
    headers: bytes | None = None  # the raw NATS/1.0 header block of an HPUB


@dataclass(frozen=True)
class Sub:
    subject: str
    queue: str | None
    sid: str


@dataclass(frozen=True)
class Unsub:
    sid: str
    max_msgs: int | None


@dataclass(frozen=True)
class Ping:
    pass


@dataclass(frozen=True)
class Pong:
    pass


@dataclass(frozen=True)
class NatsError:
    """The stream is malformed; ``message`` is the text for ``-ERR '...'``."""

    message: str


Operation = Connect | Pub | Sub | Unsub | Ping | Pong


class OperationParser(IncrementalParser[Operation, NatsError]):
    """Feed it bytes as they arrive; it returns every operation completed so far."""

    def __init__(self, max_payload: int) -> None:
        super().__init__()
        self.max_payload = max_payload
        # a PUB/HPUB whose control line was read: (subject, reply, header size, total size)
        self._awaiting: tuple[str, str | None, int | None, int] | None = None

    def _fatal(self, reason: str) -> NatsError:
        return NatsError(reason)

    def _next(self) -> Operation | None:
        if self._awaiting is not None:
            return self._payload()
        plain = plain_pub(self._buffer, self._pos, self.max_payload, MAX_CONTROL_LINE)
        if plain is not None:  # the commonest operation, read in one step (anything else: below)
            subject, payload, self._pos = plain
            return Pub(subject, None, payload)
        end = self._buffer.find(b"\n", self._pos)
        if end < 0:
            if len(self._buffer) - self._pos > MAX_CONTROL_LINE:
                raise Malformed("Maximum Control Line Exceeded")
            return None
        if end - self._pos > MAX_CONTROL_LINE:
            raise Malformed("Maximum Control Line Exceeded")
        line = bytes(self._buffer[self._pos:end]).rstrip(b"\r")
        self._pos = end + 1
        parts = line.split(None, 1)
        name = parts[0].upper() if parts else b""
        rest = parts[1] if len(parts) > 1 else b""
        args = rest.split()
        if name == b"PUB":
            return self._publish(args, headers=False)
        if name == b"HPUB":
            return self._publish(args, headers=True)
        if name == b"SUB":
            if len(args) not in (2, 3):
                raise Malformed("Invalid Arguments: SUB <subject> [queue group] <sid>")
            subject, sid = _text(args[0]), _text(args[-1])
            return Sub(subject, _text(args[1]) if len(args) == 3 else None, sid)
        if name == b"UNSUB":
            if len(args) not in (1, 2):
                raise Malformed("Invalid Arguments: UNSUB <sid> [max_msgs]")
            return Unsub(_text(args[0]), _count(args[1]) if len(args) == 2 else None)
        if name == b"PING":
            return Ping()
        if name == b"PONG":
            return Pong()
        if name == b"CONNECT":
            try:
                options = orjson.loads(rest)
            except orjson.JSONDecodeError:
                raise Malformed("Invalid CONNECT: options are not JSON") from None
            if not isinstance(options, dict):
                raise Malformed("Invalid CONNECT: options must be a JSON object")
            return Connect(options)
        raise Malformed("Unknown Protocol Operation")

    def _publish(self, args: list[bytes], headers: bool) -> Operation | None:
        sizes = 2 if headers else 1
        if len(args) not in (1 + sizes, 2 + sizes):
            usage = "HPUB <subject> [reply-to] <#header bytes> <#total bytes>" if headers \
                else "PUB <subject> [reply-to] <#bytes>"
            raise Malformed(f"Invalid Arguments: {usage}")
        subject = _text(args[0])
        reply = _text(args[1]) if len(args) == 2 + sizes else None
        total = _count(args[-1])
        header_size = _count(args[-2]) if headers else None
        if header_size is not None and header_size > total:
            raise Malformed("Invalid Arguments: header size larger than total size")
        if total > self.max_payload:
            raise Malformed("Maximum Payload Violation")
        self._awaiting = (subject, reply, header_size, total)
        return self._payload()

    def _payload(self) -> Operation | None:
        subject, reply, header_size, total = self._awaiting  # type: ignore[misc]  # _awaiting is set whenever a payload is awaited
        end = self._pos + total
        if len(self._buffer) < end + 2:
            return None
        if self._buffer[end:end + 2] != b"\r\n":
            raise Malformed("Protocol Error: payload not followed by CRLF")
        body = bytes(self._buffer[self._pos:end])
        self._pos = end + 2
        self._awaiting = None
        if header_size is None:
            return Pub(subject, reply, body)
        block = body[:header_size]
        if not block.startswith(b"NATS/1.0"):
            raise Malformed("Protocol Error: headers must start with NATS/1.0")
        return Pub(subject, reply, body[header_size:], block)


def _text(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise Malformed("Invalid Arguments: not UTF-8") from None


def _count(raw: bytes) -> int:
    if not raw.isdigit():
        raise Malformed("Invalid Arguments: sizes and counts are non-negative integers")
    return int(raw)


# ---------------------------------------------------------------- what the server sends

OK = b"+OK\r\n"
PING = b"PING\r\n"
PONG = b"PONG\r\n"


def info(fields: dict) -> bytes:
    return b"INFO " + orjson.dumps(fields) + b"\r\n"


def error(message: str) -> bytes:
    return b"-ERR '" + message.replace("'", '"').replace("\r", " ").replace("\n", " ").encode() + b"'\r\n"


def msg(subject: bytes, sid: bytes, reply: bytes | None, payload: bytes) -> bytes:
    return b"MSG " + subject + b" " + sid + msg_tail(reply, payload)


def hmsg(subject: bytes, sid: bytes, reply: bytes | None, headers: bytes, payload: bytes) -> bytes:
    """A message with a header block (``NATS/1.0\\r\\nName: value\\r\\n\\r\\n``)."""
    return b"HMSG " + subject + b" " + sid + hmsg_tail(reply, headers, payload)


def msg_tail(reply: bytes | None, payload: bytes) -> bytes:
    """What follows the sid in a MSG: :func:`msg` is ``b"MSG " + subject + b" " + sid + msg_tail(...)``."""
    if reply:
        return b" %s %d\r\n%s\r\n" % (reply, len(payload), payload)
    return b" %d\r\n%s\r\n" % (len(payload), payload)


def hmsg_tail(reply: bytes | None, headers: bytes, payload: bytes) -> bytes:
    """What follows the sid in an HMSG (see :func:`msg_tail`)."""
    size = len(headers) + len(payload)
    if reply:
        return b" %s %d %d\r\n%s%s\r\n" % (reply, len(headers), size, headers, payload)
    return b" %d %d\r\n%s%s\r\n" % (len(headers), size, headers, payload)


def header_block(fields: list[tuple[str, str]]) -> bytes:
    lines = "".join(f"{name}: {value}\r\n" for name, value in fields)
    return f"NATS/1.0\r\n{lines}\r\n".encode()
