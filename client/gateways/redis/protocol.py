"""RESP: an incremental parser for Redis client commands and the reply encoders (RESP2 and RESP3).

Pure: bytes in, commands out.  :class:`CommandParser` accepts what real
clients send: arrays of bulk strings (``*2\\r\\n$4\\r\\nPING\\r\\n...``) and
inline commands (``PING\\r\\n``, as typed into telnet), in any chunking.
Bad input ends the stream with one :class:`RespError` whose text follows
Redis's own ``Protocol error: ...`` messages; the connection is then closed,
as Redis does.

Memory per connection is bounded: one argument by ``max_bulk`` (Redis's
``proto-max-bulk-len``), one whole command by ``max_command`` (counting
:data:`ARG_OVERHEAD` per argument, so a million empty arguments count too),
which with the line limits bounds the unparsed input a connection can hold,
as Redis's ``client-query-buffer-limit`` does.  A client that has not logged
in yet (:attr:`CommandParser.guarded`) may send at most 10 arguments of at most
16 KiB each, as redis-server allows an unauthenticated client; an ``AUTH`` or
``HELLO`` lifts that for what follows it (the connection puts it back if the
login fails).  Inline commands are split as
Redis's ``sdssplitargs`` splits them, by one regular expression without
backtracking (quotes and escapes included), so a 64 KiB line costs
microseconds, and runs of blank lines are skipped at once.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import cast

from fyrehose.gateways.incremental import IncrementalParser, Malformed
from fyrehose.gateways.redis.array_scan import whole_commands

Command = list[bytes]

MAX_ARGS = 1024 * 1024  # Redis's limit on multibulk length
MAX_INLINE = 64 * 1024  # Redis's PROTO_INLINE_MAX_SIZE: longest line without its CRLF
GUARDED_ARGS = 10  # arguments of a command before a login (redis-server's unauthenticated multibulk length)
GUARDED_BULK = 16384  # bytes of one argument before a login (its unauthenticated bulk length)
ARG_OVERHEAD = 64  # bytes an argument costs beyond its length (object and list slot), for max_command
_BLANK_LINES = re.compile(rb"(?:\r?\n)+")
# one argument of an inline command (sdssplitargs): plain bytes, then perhaps one quoted part that ends it
_INLINE_ARG = re.compile(
    rb"""[ \t\r\n\x0b\x0c]*+"""
    rb"""(?P<plain>[^ \t\r\n"']*+)"""
    rb"""(?:"(?P<double>(?:\\x[0-9a-fA-F]{2}|\\.|[^"\\])*+)"|'(?P<single>(?:\\'|[^'])*+)')?+""",
    re.DOTALL)
_SPECIAL = re.compile(rb"[\"'\x0b\x0c]")  # what bytes.split() would not read as sdssplitargs does
_QUOTE_END = re.compile(rb"[ \t\r\n\x0b\x0c]|\Z")
_ESCAPE = re.compile(rb"\\(x[0-9a-fA-F]{2}|.)", re.DOTALL)
_ESCAPED = {b"n": b"\n", b"r": b"\r", b"t": b"\t", b"b": b"\b", b"a": b"\a"}


@dataclass(frozen=True)
class RespError:
    """The stream is malformed; nothing after this is parsed."""

    message: str


class CommandParser(IncrementalParser[Command, RespError]):
    """Feed it bytes as they arrive; it returns every command completed so far."""

    def __init__(self, max_bulk: int = 512 * 1024 * 1024, max_args: int = MAX_ARGS,
                 max_command: int = 1 << 62) -> None:
        super().__init__()
        self.max_bulk = max_bulk
        self.max_args = max_args
        self.max_command = max_command
        self._size = 0  # bytes the command being read holds so far (with ARG_OVERHEAD each)
        self._args: Command | None = None  # the array being read
        self._remaining = 0  # elements of that array still to come
        self._bulk: int | None = None  # length of the bulk string being read
        self.guarded = False  # the client has not logged in: redis-server's limits on an unauthenticated one

    @property
    def held(self) -> int:
        """Bytes buffered, plus the arguments already read of an incomplete command."""
        return len(self._buffer) + (self._size if self._args is not None else 0)

    def feed(self, data: bytes) -> list[Command | RespError]:
        """The commands completed so far: a fresh read's arrays of bulk strings in one compiled pass
        (:mod:`~fyrehose.gateways.redis.array_scan`), the rest one item at a time."""
        if self._buffer or self._args is not None or self.guarded or self.failed is not None:
            return super().feed(data)
        scanned, end = whole_commands(data, self.max_bulk, self.max_args, self.max_command)
        commands = cast("list[Command | RespError]", scanned)
        if end == len(data):
            return commands
        rest = super().feed(data[end:] if end else data)
        return commands + rest if commands else rest

    def _fatal(self, reason: str) -> RespError:
        return RespError(reason)

    def _line(self) -> bytes | None:
        """The line at the cursor (without CRLF), consumed; None if it has not fully arrived."""
        end = self._buffer.find(b"\r\n", self._pos)
        if end < 0:
            if len(self._buffer) - self._pos > MAX_INLINE:
                raise Malformed("Protocol error: too big count string")
            return None
        line = bytes(self._buffer[self._pos:end])
        self._pos = end + 2
        return line

    def _next(self) -> Command | None:
        """The next command; an empty list for input that holds none (``*0``, a blank line)."""
        buffer = self._buffer
        if self._args is None:
            if self._pos >= len(buffer):
                return None
            if buffer[self._pos] != 0x2A:  # not '*': an inline command
                return self._lifted(self._inline()) if self.guarded else self._inline()
            start = self._pos
            line = self._line()
            if line is None:
                return None
            count = _integer(line[1:], "invalid multibulk length")
            if count > self.max_args:
                self._pos = start
                raise Malformed("Protocol error: invalid multibulk length")
            if count > GUARDED_ARGS and self.guarded:
                raise Malformed("Protocol error: unauthenticated multibulk length")
            if count <= 0:
                return []
            self._args, self._remaining, self._size = [], count, 0
        while self._remaining:
            if self._bulk is None:
                if self._pos >= len(buffer):
                    return None
                if buffer[self._pos] != 0x24:  # '$'
                    got = chr(buffer[self._pos])
                    raise Malformed(f"Protocol error: expected '$', got '{got}'")
                line = self._line()
                if line is None:
                    return None
                length = _integer(line[1:], "invalid bulk length")
                if not 0 <= length <= self.max_bulk:
                    raise Malformed("Protocol error: invalid bulk length")
                if length > GUARDED_BULK and self.guarded:
                    raise Malformed("Protocol error: unauthenticated bulk length")
                self._size += length + ARG_OVERHEAD
                if self._size > self.max_command:
                    raise Malformed(f"Protocol error: command larger than {self.max_command} bytes")
                self._bulk = length
            end = self._pos + self._bulk
            if len(buffer) < end + 2:
                return None
            # the two bytes after a bulk string are skipped unread, as redis-server (and hiredis) skip them
            self._args.append(bytes(buffer[self._pos:end]))
            self._pos = end + 2
            self._bulk = None
            self._remaining -= 1
        command, self._args = self._args, None
        return self._lifted(command) if self.guarded else command

    def _lifted(self, command: Command | None) -> Command | None:
        """A login lifts the limits on what follows it, read as redis-server reads it after a login."""
        if command and command[0].lower() in (b"auth", b"hello"):
            self.guarded = False
        return command

    def _inline(self) -> Command | None:
        blank = _BLANK_LINES.match(self._buffer, self._pos)
        if blank is not None:
            self._pos = blank.end()
            return []
        end = self._buffer.find(b"\n", self._pos)
        if end < 0:
            if len(self._buffer) - self._pos > MAX_INLINE:
                raise Malformed("Protocol error: too big inline request")
            return None
        line = bytes(self._buffer[self._pos:end]).rstrip(b"\r")
        self._pos = end + 1
        return split_inline(line)


def split_inline(line: bytes) -> Command:
    """The arguments of an inline command, as Redis's ``sdssplitargs`` reads them."""
    line = line.split(b"\x00", 1)[0]  # a C string to Redis: a NUL ends it
    if _SPECIAL.search(line) is None:
        return line.split()
    args: Command = []
    position, end = 0, len(line)
    while True:
        found = _INLINE_ARG.match(line, position)
        assert found is not None  # every part of the expression may be empty
        position = found.end()
        plain, double, single = found.group("plain", "double", "single")
        if double is None and single is None:
            if plain:
                args.append(plain)
            if position >= end:
                return args
            if line[position] in b"\"'":
                raise Malformed("Protocol error: unbalanced quotes in request")  # a quote that never closes
            continue
        if _QUOTE_END.match(line, position) is None:
            raise Malformed("Protocol error: unbalanced quotes in request")  # a closing quote must end the argument
        if double is not None:
            args.append(plain + _ESCAPE.sub(_unescape, double))
        else:
            args.append(plain + single.replace(b"\\'", b"'"))


def _unescape(found: re.Match) -> bytes:
    code = found.group(1)
    if len(code) == 3:
        return bytes((int(code[1:], 16),))
    return _ESCAPED.get(code, code)


def _integer(text: bytes, what: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise Malformed(f"Protocol error: {what}") from None


# ---------------------------------------------------------------- replies

def simple(text: str) -> bytes:
    return b"+" + text.encode() + b"\r\n"


def error(text: str) -> bytes:
    """An error reply; ``text`` starts with its code (``ERR ...``, ``NOPROTO ...``)."""
    return b"-" + text.replace("\r", " ").replace("\n", " ").encode("utf-8", "replace") + b"\r\n"


def integer(value: int) -> bytes:
    return b":%d\r\n" % value


def bulk(data: bytes) -> bytes:
    return b"$%d\r\n%s\r\n" % (len(data), data)


def null(resp3: bool) -> bytes:
    return b"_\r\n" if resp3 else b"$-1\r\n"


def array(items: list[bytes]) -> bytes:
    """An array of already encoded replies."""
    return b"*%d\r\n" % len(items) + b"".join(items)


def push(items: list[bytes], resp3: bool) -> bytes:
    """Out-of-band data (pub/sub messages): a RESP3 push, or a plain array in RESP2."""
    return (b">%d\r\n" if resp3 else b"*%d\r\n") % len(items) + b"".join(items)


def mapping(pairs: list[tuple[bytes, bytes]], resp3: bool) -> bytes:
    """A map of encoded keys to encoded values; RESP2 has no map type and gets a flat array."""
    body = b"".join(key + value for key, value in pairs)
    return (b"%%%d\r\n" % len(pairs) if resp3 else b"*%d\r\n" % (2 * len(pairs))) + body
