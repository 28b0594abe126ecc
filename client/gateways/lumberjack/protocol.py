"""The Lumberjack wire format (v1, plus the v2 frames Beats send; docs/lumberjack.md): bytes in, frames out.

Every frame starts with a version byte (ASCII ``'1'`` or ``'2'``) and a type
byte; all integers are 32-bit unsigned big endian.  The version is read per
frame, as Logstash does, so one connection may mix versions.

=====  ====================  ===================================================
type   sent by               payload
=====  ====================  ===================================================
``W``  writer                window size
``D``  writer                sequence, pair count, then (key len, key, value len, value) per pair
``J``  writer (v2)           sequence, JSON length, JSON document
``C``  writer (v2)           compressed length, a zlib stream holding ``D``/``J`` frames
``A``  reader                sequence: every event up to it is acknowledged
=====  ====================  ===================================================

:class:`FrameDecoder` is a pure incremental parser: :meth:`FrameDecoder.feed`
takes whatever bytes arrived, returns the frames completed so far (the events
of a ``C`` frame come out as the ``D``/``J`` frames it holds) and keeps a
partial frame for the next call.  Every size is checked against a limit as
soon as its header arrives, before any payload is buffered, and a ``C`` frame
is inflated with a bounded ``zlib.decompressobj`` so a compression bomb costs
at most the limit.  Bad input raises :class:`LumberjackError`; after that the
decoder refuses further input, because the stream has lost its framing.

The ``encode_*`` functions build frames for writers (tests, benchmarks) and
the reader's ``A`` frame.
"""
from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable
from dataclasses import dataclass

VERSION_1 = ord("1")
VERSION_2 = ord("2")
VERSIONS = (VERSION_1, VERSION_2)

WINDOW = ord("W")
DATA = ord("D")
JSON = ord("J")
COMPRESSED = ord("C")
ACK = ord("A")

# Larger events could not be published anyway: one backbone message carries 65498 bytes.
DEFAULT_MAX_EVENT_BYTES = 65498
DEFAULT_MAX_COMPRESSED_BYTES = 32 << 20

_U32 = struct.Struct(">I")
_U32_PAIR = struct.Struct(">II")
_HEADER = 2  # version, type
_ACK = struct.Struct(">BBI")


class LumberjackError(ValueError):
    """Input that breaks the Lumberjack protocol; the connection cannot continue after it."""


@dataclass(frozen=True, slots=True)
class WindowSize:
    version: int
    size: int


@dataclass(frozen=True, slots=True)
class KeyValueData:
    """A ``D`` frame: a map of strings (the protocol allows only strings: docs/lumberjack.md, "D (data, v1)")."""

    version: int
    seq: int
    fields: dict[str, str]


@dataclass(frozen=True, slots=True)
class JsonData:
    """A ``J`` frame; the document is parsed later, by whoever needs its fields."""

    version: int
    seq: int
    document: bytes


DataFrame = KeyValueData | JsonData
Frame = WindowSize | KeyValueData | JsonData


def _type_name(kind: int) -> str:
    char = chr(kind)
    return f"0x{kind:02x} ({char!r})" if char.isprintable() and kind < 0x7F else f"0x{kind:02x}"


class FrameDecoder:
    """Incremental decoder of a writer's byte stream.

    ``max_event_bytes`` bounds one ``D`` frame's payload (sequence and pairs)
    and one ``J`` document; ``max_compressed_bytes`` bounds both the stored
    size of a ``C`` frame and what it inflates to.
    """

    def __init__(self, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
                 max_compressed_bytes: int = DEFAULT_MAX_COMPRESSED_BYTES) -> None:
        self.max_event_bytes = max_event_bytes
        self.max_compressed_bytes = max_compressed_bytes
        self._buffer = bytearray()
        self._failed: LumberjackError | None = None

    @property
    def buffered(self) -> int:
        """Bytes of an incomplete frame held for the next :meth:`feed` (non-zero at EOF = truncated)."""
        return len(self._buffer)

    @property
    def committed(self) -> int:
        """Bytes the incomplete frame will hold once whole, as far as its header tells (at least :attr:`buffered`).

        Known as soon as a JSON or compressed frame's length has arrived, so a
        driver can refuse a frame by its declared size before buffering it.
        """
        buffer = self._buffer
        if len(buffer) >= _HEADER + 4 and buffer[1] == COMPRESSED:
            return max(len(buffer), _HEADER + 4 + _U32.unpack_from(buffer, _HEADER)[0])
        if len(buffer) >= _HEADER + 8 and buffer[1] == JSON:
            return max(len(buffer), _HEADER + 8 + _U32_PAIR.unpack_from(buffer, _HEADER)[1])
        return len(buffer)

    def feed(self, data: bytes) -> list[Frame]:
        if self._failed is not None:
            raise LumberjackError(f"stream already broken: {self._failed}")
        buffer = self._buffer
        buffer += data
        frames: list[Frame] = []
        offset = 0
        try:
            while True:
                end = self._parse(buffer, offset, frames, nested=False)
                if end is None:
                    break
                offset = end
        except LumberjackError as exc:
            self._failed = exc
            raise
        finally:
            del buffer[:offset]
        return frames

    def _parse(self, buffer: bytes | bytearray, offset: int, out: list[Frame], nested: bool) -> int | None:
        """Append the frame at ``offset`` to ``out`` and return where the next begins; None if incomplete."""
        available = len(buffer) - offset
        if available < _HEADER:
            return None
        version, kind = buffer[offset], buffer[offset + 1]
        if version not in VERSIONS:
            raise LumberjackError(f"unknown protocol version byte 0x{version:02x} (expected '1' or '2')")
        body = offset + _HEADER
        if kind == DATA:
            return self._parse_pairs(buffer, body, version, out)
        if kind == JSON:
            if available < _HEADER + 8:
                return None
            seq, length = _U32_PAIR.unpack_from(buffer, body)
            if length > self.max_event_bytes:
                raise LumberjackError(f"JSON frame of {length} bytes exceeds the limit of {self.max_event_bytes}")
            end = body + 8 + length
            if end > len(buffer):
                return None
            out.append(JsonData(version, seq, bytes(buffer[body + 8:end])))
            return end
        if nested:
            if kind == COMPRESSED:
                raise LumberjackError("compressed frame inside a compressed frame")
            if kind == WINDOW:
                raise LumberjackError("window size frame inside a compressed frame")
        if kind == WINDOW:
            if available < _HEADER + 4:
                return None
            (size,) = _U32.unpack_from(buffer, body)
            if size == 0:
                raise LumberjackError("window size 0")
            out.append(WindowSize(version, size))
            return body + 4
        if kind == COMPRESSED:
            if available < _HEADER + 4:
                return None
            (length,) = _U32.unpack_from(buffer, body)
            if length > self.max_compressed_bytes:
                raise LumberjackError(
                    f"compressed frame of {length} bytes exceeds the limit of {self.max_compressed_bytes}")
            end = body + 4 + length
            if end > len(buffer):
                return None
            self._inflate(bytes(buffer[body + 4:end]), out)
            return end
        if kind == ACK:
            raise LumberjackError("ack frame from a writer (only readers send 'A')")
        raise LumberjackError(f"unknown frame type {_type_name(kind)}")

    def _parse_pairs(self, buffer: bytes | bytearray, body: int, version: int, out: list[Frame]) -> int | None:
        limit = self.max_event_bytes
        if len(buffer) - body < 8:
            return None
        seq, count = _U32_PAIR.unpack_from(buffer, body)
        if 8 + 8 * count > limit:  # every pair takes at least its two lengths
            raise LumberjackError(f"data frame of {count} pairs exceeds the limit of {limit} bytes")
        position = body + 8
        strings: list[str] = []
        for _ in range(2 * count):
            if len(buffer) - position < 4:
                return None
            (length,) = _U32.unpack_from(buffer, position)
            if position + 4 + length - body > limit:
                raise LumberjackError(f"data frame exceeds the limit of {limit} bytes")
            end = position + 4 + length
            if end > len(buffer):
                return None
            try:
                strings.append(bytes(buffer[position + 4:end]).decode("utf-8"))
            except UnicodeDecodeError:
                raise LumberjackError(f"data frame {seq}: a key or value is not UTF-8") from None
            position = end
        out.append(KeyValueData(version, seq, dict(zip(strings[0::2], strings[1::2]))))
        return position

    def _inflate(self, compressed: bytes, out: list[Frame]) -> None:
        limit = self.max_compressed_bytes
        inflater = zlib.decompressobj()
        try:
            plain = inflater.decompress(compressed, limit + 1)
        except zlib.error as exc:
            raise LumberjackError(f"compressed frame is not valid zlib data: {exc}") from None
        if len(plain) > limit:
            raise LumberjackError(f"compressed frame inflates beyond the limit of {limit} bytes")
        if not inflater.eof:
            raise LumberjackError("compressed frame holds a truncated zlib stream")
        if inflater.unused_data:
            raise LumberjackError("compressed frame has bytes after its zlib stream")
        offset = 0
        while offset < len(plain):
            end = self._parse(plain, offset, out, nested=True)
            if end is None:
                raise LumberjackError("compressed frame ends inside a frame")
            offset = end


# ---------------------------------------------------------------- encoding


def encode_window(size: int, version: int = VERSION_2) -> bytes:
    return bytes((version, WINDOW)) + _U32.pack(size)


def encode_ack(seq: int, version: int = VERSION_2) -> bytes:
    return _ACK.pack(version, ACK, seq)


def encode_key_value(seq: int, fields: dict[str, str], version: int = VERSION_1) -> bytes:
    parts = [bytes((version, DATA)), _U32_PAIR.pack(seq, len(fields))]
    for key, value in fields.items():
        for text in (key, value):
            raw = text.encode("utf-8")
            parts.append(_U32.pack(len(raw)))
            parts.append(raw)
    return b"".join(parts)


def encode_json(seq: int, document: bytes, version: int = VERSION_2) -> bytes:
    return bytes((version, JSON)) + _U32_PAIR.pack(seq, len(document)) + document


def encode_compressed(frames: Iterable[bytes], version: int = VERSION_2, level: int = 6) -> bytes:
    """A ``C`` frame holding the given encoded frames."""
    packed = zlib.compress(b"".join(frames), level)
    return bytes((version, COMPRESSED)) + _U32.pack(len(packed)) + packed


def encode(frame: Frame) -> bytes:
    if isinstance(frame, WindowSize):
        return encode_window(frame.size, frame.version)
    if isinstance(frame, KeyValueData):
        return encode_key_value(frame.seq, frame.fields, frame.version)
    return encode_json(frame.seq, frame.document, frame.version)


def decode_acks(data: bytes) -> list[tuple[int, int]]:
    """(version, sequence) of each complete ``A`` frame in ``data``: what a writer reads."""
    acks = []
    for offset in range(0, len(data) - len(data) % _ACK.size, _ACK.size):
        version, kind, seq = _ACK.unpack_from(data, offset)
        if kind != ACK:
            raise LumberjackError(f"expected an ack frame, got type {_type_name(kind)}")
        acks.append((version, seq))
    return acks
