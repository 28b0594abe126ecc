"""Marlin PubSub (docs/gateways.md) over TCP: frame codec and an incremental frame parser.

Marlin defines messages (``VERSION TYPE PAYLOAD``) but no way to tell where
one ends on a byte stream, since SUBSCRIBE, UNSUBSCRIBE and RESPONSE carry
their text up to the end of the message.  Over TCP each message is therefore
preceded by its length (docs/gateways.md, "Marlin over TCP")::

    FRAME_LENGTH u32 | VERSION 0x00 | TYPE u8 | PAYLOAD

    SUBSCRIBE   0x00  CHANNEL (the rest)
    UNSUBSCRIBE 0x01  CHANNEL (the rest)
    RESPONSE    0x02  STATUS u8 (0x00 OK, 0x01 ERROR) | MESSAGE (the rest)
    MESSAGE     0x03  DATA_LENGTH u64 | MESSAGE_ID u64 | CHANNEL_LENGTH u16 | CHANNEL | DATA

Pure: the parser takes bytes and returns frames; a frame that is well
delimited but wrong (unknown version or type, inconsistent lengths) becomes a
non-fatal :class:`FrameError`, so the connection can answer it and go on; a
bad length prefix is fatal, since the stream can no longer be followed.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

from fyrehose.gateways.incremental import IncrementalParser, Malformed

VERSION = 0x00
SUBSCRIBE = 0x00
UNSUBSCRIBE = 0x01
RESPONSE = 0x02
MESSAGE = 0x03
OK = 0x00
ERROR = 0x01

_LENGTH = struct.Struct(">I")
_MESSAGE_HEAD = struct.Struct(">BBQQH")  # version, type, data length, id, channel length
MAX_CHANNEL = 0xFFFF


@dataclass(frozen=True)
class Subscribe:
    channel: bytes


@dataclass(frozen=True)
class Unsubscribe:
    channel: bytes


@dataclass(frozen=True)
class Response:
    ok: bool
    message: bytes


@dataclass(frozen=True)
class Message:
    id: int
    channel: bytes
    data: bytes


@dataclass(frozen=True)
class FrameError:
    reason: str
    fatal: bool


Frame = Subscribe | Unsubscribe | Response | Message


class FrameParser(IncrementalParser[Frame | FrameError, FrameError]):
    """Feed it bytes as they arrive; it returns every frame completed so far."""

    def __init__(self, max_frame: int = 1 << 20) -> None:
        super().__init__()
        self.max_frame = max_frame

    def _next(self) -> Frame | FrameError | None:
        buffer, pos = self._buffer, self._pos
        if len(buffer) - pos < 4:
            return None
        (length,) = _LENGTH.unpack_from(buffer, pos)
        if not 2 <= length <= self.max_frame:
            raise Malformed(f"frame length {length} outside 2..{self.max_frame}")
        end = pos + 4 + length
        if len(buffer) < end:
            return None
        self._pos = end
        return decode_body(bytes(buffer[pos + 4:end]))

    def _fatal(self, reason: str) -> FrameError:
        return FrameError(reason, fatal=True)


def decode_body(body: bytes) -> Frame | FrameError:
    """One message without its length prefix."""
    version, kind = body[0], body[1]
    if version != VERSION:
        return FrameError(f"unsupported version {version} (this node speaks version {VERSION})", fatal=False)
    if kind == SUBSCRIBE:
        return Subscribe(body[2:])
    if kind == UNSUBSCRIBE:
        return Unsubscribe(body[2:])
    if kind == RESPONSE:
        if len(body) < 3 or body[2] not in (OK, ERROR):
            return FrameError("RESPONSE without an OK (0x00) or ERROR (0x01) status byte", fatal=False)
        return Response(body[2] == OK, body[3:])
    if kind == MESSAGE:
        if len(body) < _MESSAGE_HEAD.size:
            return FrameError(f"MESSAGE shorter than its {_MESSAGE_HEAD.size}-byte header", fatal=False)
        _, _, data_length, message_id, channel_length = _MESSAGE_HEAD.unpack_from(body)
        expected = _MESSAGE_HEAD.size + channel_length + data_length
        if expected != len(body):
            return FrameError(f"MESSAGE lengths (channel {channel_length}, data {data_length}) "
                              f"do not add up to its frame of {len(body)} bytes", fatal=False)
        start = _MESSAGE_HEAD.size
        return Message(message_id, body[start:start + channel_length], body[start + channel_length:])
    return FrameError(f"unknown message type {kind:#04x}", fatal=False)


def encode(frame: Frame) -> bytes:
    """The frame with its length prefix."""
    if isinstance(frame, Message):
        return message_frame(frame.id, frame.channel, frame.data)
    if isinstance(frame, Subscribe):
        body = bytes((VERSION, SUBSCRIBE)) + frame.channel
    elif isinstance(frame, Unsubscribe):
        body = bytes((VERSION, UNSUBSCRIBE)) + frame.channel
    else:
        body = bytes((VERSION, RESPONSE, OK if frame.ok else ERROR)) + frame.message
    return _LENGTH.pack(len(body)) + body


def message_frame(message_id: int, channel: bytes, data: bytes) -> bytes:
    """A MESSAGE frame, built in one step for the delivery hot path."""
    if len(channel) > MAX_CHANNEL:
        raise ValueError(f"channel longer than {MAX_CHANNEL} bytes")
    head = _MESSAGE_HEAD.pack(VERSION, MESSAGE, len(data), message_id, len(channel))
    return _LENGTH.pack(len(head) + len(channel) + len(data)) + head + channel + data
