"""Wire codec of the fyrehose backbone protocol: bytes in, frames out, and back.

Pure functions only (sans-IO), so that the backbone, every client and every
test share one definition of the wire format.  The format is the base protocol of
docs/protocol.md plus its backwards-compatible extensions: the BATCH keepalive
flag, several DELIVER/PUSH/CONFIRM frames packed into one datagram, a CONFIRM
tag in the unused bytes of PUSH, the 0x40 CONFIRM frame, the legacy 7-byte
KEEPALIVE (docs/protocol.md, "Legacy KEEPALIVE") and address validation's cookie
(the 0x21 COOKIE frame, a KEEPALIVE and a KEEPALIVE-ACK with a cookie after their
usual fields; docs/protocol.md, "Address validation").

Every malformed input raises :class:`ProtocolError` (never ``IndexError`` or
``struct.error``), because the backbone must count and drop bad datagrams
without ever crashing on them.
"""
from __future__ import annotations

import ipaddress
import struct
import sys
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from socket import inet_ntoa  # address conversion only: no sockets here

Address = tuple[str, int]  # an IPv4 literal and a port, as ADDR and PORT carry them

DELIVER = 0x01
PUSH = 0x02
REQUEST = 0x04
FORWARD = 0x08
KEEPALIVE = 0x10
KEEPALIVE_ACK = 0x20
CONFIRM = 0x40

FLAG_NOSUBSCRIBE = 0x1
FLAG_NOJOURNAL = 0x2
FLAG_BATCH = 0x4
FLAG_HEAD = 0x8  # extension: the KEEPALIVE-ACK also carries the last sequence issued
FLAG_MULTICAST = 0x10  # extension: this client takes DELIVERs from the backbone's multicast group, none unicast
FLAG_REDELIVERING = 0x20  # extension: the client takes a FORWARD to 0.0.0.0:0 as "the backbone re-DELIVERs this"
FLAG_GONE = 0x40  # extension: the client takes GONE frames (numbers no one will ever deliver)
GONE = 0x80  # extension frame: 0x80 FROM(6) TO(6) REASON(1), backbone to a client that set FLAG_GONE
GONE_SIZE = 14
GONE_LOST = 0  # issued perhaps, but neither the backbone nor any client holds them
GONE_NEVER_SENT = 1  # never DELIVERed or CONFIRMed by anyone
COOKIE = 0x21  # extension frame: 0x21 COOKIE(8), a validating backbone's answer to a KEEPALIVE it may not serve yet
COOKIE_SIZE = 8  # the cookie itself: a truncated MAC of the address and a time slot
COOKIE_FRAME_SIZE = 1 + COOKIE_SIZE

MAX_DATAGRAM = 65507  # largest IPv4 UDP payload
FRAME_HEADER = 9  # type(1) length(2) sequence-or-tag(6)
MAX_PAYLOAD = MAX_DATAGRAM - FRAME_HEADER  # 65498
MAX_SEQUENCE = (1 << 48) - 1
MAX_TAG = MAX_SEQUENCE
MAX_REQUEST_SPAN = 1 << 16  # the backbone forwards at most this many sequences per REQUEST
TOKEN_SIZE = 16

KEEPALIVE_SIZE = 29
LEGACY_KEEPALIVE_SIZE = 7
KEEPALIVE_ACK_SIZE = 17
KEEPALIVE_ACK_HEAD_SIZE = 23  # with FLAG_HEAD: token, then the last sequence issued (0 = none yet)
KEEPALIVE_COOKIE_SIZE = KEEPALIVE_SIZE + COOKIE_SIZE  # a KEEPALIVE echoing the cookie after its token
RANGE_SIZE = 19  # REQUEST and FORWARD
CONFIRM_SIZE = 13
_CONFIRM_TYPES = bytes([CONFIRM]) * (65535 // CONFIRM_SIZE + 1)
_SWAP = sys.byteorder == "little"  # array('Q') is native; the wire is big endian

_HEADER = struct.Struct(">BHHI")  # type, length, 48-bit value as high 16 + low 32 bits
_RANGE = struct.Struct(">B4sHHIHI")  # type, addr, port, from (16+32), to (16+32)
_KEEPALIVE = struct.Struct(">B4sHHI16s")  # type, addr, port, flags (16+32), token
_LEGACY_KEEPALIVE = struct.Struct(">B4sH")
_CONFIRM = struct.Struct(">BHIHI")  # type, tag (16+32), sequence (16+32)
_U48 = struct.Struct(">HI")

_NAMES = {
    DELIVER: "DELIVER",
    PUSH: "PUSH",
    REQUEST: "REQUEST",
    FORWARD: "FORWARD",
    KEEPALIVE: "KEEPALIVE",
    KEEPALIVE_ACK: "KEEPALIVE-ACK",
    CONFIRM: "CONFIRM",
    GONE: "GONE",
    COOKIE: "COOKIE",
}


class ProtocolError(ValueError):
    """A datagram or frame that does not follow the wire protocol.

    ``reason`` is a short stable label (used as a metrics label by the backbone).
    """

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


class PayloadTooLarge(ProtocolError):
    """The payload does not fit in one IPv4 UDP datagram with its frame header."""

    def __init__(self, size: int) -> None:
        super().__init__("oversize", f"payload of {size} bytes exceeds the maximum of {MAX_PAYLOAD}")
        self.size = size


@dataclass(frozen=True, slots=True)
class Deliver:
    seq: int
    data: bytes


@dataclass(frozen=True, slots=True)
class Push:
    data: bytes
    tag: int = 0  # non-zero asks the backbone for a CONFIRM carrying this tag


@dataclass(frozen=True, slots=True)
class Request:
    addr: str
    port: int
    from_seq: int
    to_seq: int


@dataclass(frozen=True, slots=True)
class Forward:
    addr: str
    port: int
    from_seq: int
    to_seq: int


@dataclass(frozen=True, slots=True)
class Keepalive:
    addr: str = "0.0.0.0"  # 0.0.0.0 / port 0 mean "the packet's source"
    port: int = 0
    flags: int = 0
    token: bytes = bytes(TOKEN_SIZE)
    legacy: bool = False  # the 7-byte legacy form (docs/protocol.md): no flags, no token
    cookie: bytes = b""  # address validation: the backbone's cookie echoed (COOKIE_SIZE bytes), or none


@dataclass(frozen=True, slots=True)
class KeepaliveAck:
    token: bytes
    head: int | None = None  # last sequence issued; only sent to clients that set FLAG_HEAD
    cookie: bytes = b""  # a fresh cookie for a client that echoed one of the previous time slot, or none


@dataclass(frozen=True, slots=True)
class Confirm:
    tag: int
    seq: int


Frame = Deliver | Push | Request | Forward | Keepalive | KeepaliveAck | Confirm

# Frames that may stand several to a datagram; the others fill a datagram alone.
PACKABLE = (Deliver, Push, Confirm)


def frame_name(frame_type: int) -> str:
    return _NAMES.get(frame_type, f"0x{frame_type:02x}")


# ---------------------------------------------------------------- encoding


def _check_payload(data: bytes) -> None:
    if len(data) > MAX_PAYLOAD:
        raise PayloadTooLarge(len(data))


def _check_u48(name: str, value: int, minimum: int = 0) -> None:
    if not (minimum <= value <= MAX_SEQUENCE):
        raise ProtocolError("bad value", f"{name} {value} outside {minimum}..{MAX_SEQUENCE}")


def _pack_addr(addr: str) -> bytes:
    try:
        return ipaddress.IPv4Address(addr).packed
    except ValueError as exc:
        raise ProtocolError("bad address", f"{addr!r} is not an IPv4 address") from exc


def _check_port(port: int) -> None:
    if not (0 <= port <= 0xFFFF):
        raise ProtocolError("bad port", f"{port} outside 0..65535")


def encode_deliver(seq: int, data: bytes) -> bytes:
    _check_payload(data)
    _check_u48("sequence", seq, 1)
    return _HEADER.pack(DELIVER, len(data), seq >> 32, seq & 0xFFFFFFFF) + data


def encode_push(data: bytes, tag: int = 0) -> bytes:
    _check_payload(data)
    _check_u48("tag", tag)
    return _HEADER.pack(PUSH, len(data), tag >> 32, tag & 0xFFFFFFFF) + data


_GONE = struct.Struct(">BHIHIB")


def encode_gone(from_seq: int, to_seq: int, reason: int) -> bytes:
    """A GONE frame (docs/protocol.md): the backbone's answer to a REQUEST for numbers no one will deliver."""
    return _GONE.pack(GONE, from_seq >> 32, from_seq & 0xFFFFFFFF, to_seq >> 32, to_seq & 0xFFFFFFFF, reason)


def decode_gone(datagram: bytes | bytearray | memoryview) -> tuple[int, int, int]:
    """(from, to, reason) of a GONE datagram; ProtocolError when it is not a well-formed one."""
    if len(datagram) != GONE_SIZE or datagram[0] != GONE:
        raise ProtocolError("bad size", f"a GONE frame is {GONE_SIZE} bytes")
    _, f_high, f_low, t_high, t_low, reason = _GONE.unpack_from(datagram)
    from_seq, to_seq = (f_high << 32) | f_low, (t_high << 32) | t_low
    if not 1 <= from_seq <= to_seq or reason not in (GONE_LOST, GONE_NEVER_SENT):
        raise ProtocolError("bad value", "a GONE frame names no range of sequences or an unknown reason")
    return from_seq, to_seq, reason


def encode_cookie(cookie: bytes) -> bytes:
    """A COOKIE frame (docs/protocol.md, "Address validation"): echo this in the KEEPALIVEs to be served."""
    if len(cookie) != COOKIE_SIZE:
        raise ProtocolError("bad value", f"a cookie is {COOKIE_SIZE} bytes")
    return bytes((COOKIE,)) + cookie


def decode_cookie(datagram: bytes | bytearray | memoryview) -> bytes:
    """The cookie a COOKIE datagram carries; ProtocolError when it is not a well-formed one."""
    if len(datagram) != COOKIE_FRAME_SIZE or datagram[0] != COOKIE:
        raise ProtocolError("bad size", f"a COOKIE frame is {COOKIE_FRAME_SIZE} bytes")
    return bytes(datagram[1:])


def encode_confirm(tag: int, seq: int) -> bytes:
    _check_u48("tag", tag, 1)
    _check_u48("sequence", seq, 1)
    return _CONFIRM.pack(CONFIRM, tag >> 32, tag & 0xFFFFFFFF, seq >> 32, seq & 0xFFFFFFFF)


def encode_pushes(payloads: Sequence[bytes], tags: Sequence[int]) -> list[bytes]:
    """PUSH frames for many payloads at once (a publisher's hot path): the tags are the caller's own, non-zero u48."""
    if payloads and max(map(len, payloads)) > MAX_PAYLOAD:
        raise PayloadTooLarge(max(map(len, payloads)))
    pack = _HEADER.pack
    return [pack(PUSH, len(data), tag >> 32, tag & 0xFFFFFFFF) + data for data, tag in zip(payloads, tags, strict=True)]


def encode_confirms(confirmed: Iterable[tuple[int, int]]) -> list[bytes]:
    """CONFIRM frames for (tag, sequence) pairs the backbone itself just issued: valid by construction, unchecked."""
    pack = _CONFIRM.pack
    return [pack(CONFIRM, tag >> 32, tag & 0xFFFFFFFF, seq >> 32, seq & 0xFFFFFFFF) for tag, seq in confirmed]


def uniform_step(datagram: bytes | bytearray | memoryview, frame_type: int) -> int:
    """The frame size when ``datagram`` is only well-formed ``frame_type`` frames (DELIVER or PUSH) of one size, else 0.

    Frames of one size tile the datagram exactly, so checking every frame's type
    and LENGTH bytes at that stride proves what a frame-by-frame :func:`scan`
    would, with a few C-level strided comparisons instead of a loop per frame.
    """
    size = len(datagram)
    if size < FRAME_HEADER or datagram[0] != frame_type:
        return 0
    high, low = datagram[1], datagram[2]
    step = FRAME_HEADER + ((high << 8) | low)
    if step > MAX_DATAGRAM or size % step:
        return 0
    count = size // step
    if count > 1 and (
        datagram[0::step] != bytes((frame_type,)) * count
        or datagram[1::step] != bytes((high,)) * count
        or datagram[2::step] != bytes((low,)) * count
    ):
        return 0
    return step


def u48_column(data: bytes | bytearray | memoryview, offset: int, step: int, count: int) -> array[int]:
    """The big-endian 6-byte field at ``offset`` of each of ``count`` records of ``step`` bytes, as integers.

    Strided slices instead of a loop per record: the tags and sequence numbers
    of a packed datagram in a few C-level copies.
    """
    raw = bytearray(8 * count)
    for k in range(6):
        raw[2 + k::8] = data[offset + k::step]
    numbers = array("Q", raw)
    if _SWAP:
        numbers.byteswap()
    return numbers


def put_u48_column(buf: bytearray, offset: int, step: int, numbers: array[int]) -> None:
    """Write ``numbers`` as the big-endian 6-byte field at ``offset`` of consecutive records of ``step`` bytes.

    The inverse of :func:`u48_column`: six strided copies, however many records.
    """
    if _SWAP:
        numbers = array("Q", numbers)
        numbers.byteswap()
    raw = numbers.tobytes()
    end = offset + step * len(numbers)
    for k in range(6):
        buf[offset + k:end:step] = raw[2 + k::8]


_HIGH_BYTES = bytes(number >> 8 for number in range(1 << 16)) * 2  # byte 4 of the u48 fields 0, 1, ... (cycle twice)
_LOW_BYTES = bytes(number & 0xFF for number in range(1 << 16)) * 2  # byte 5 of them
_FEW = 16  # fewer numbers than this are cheaper written and checked one at a time than as six columns


def consecutive_u48_columns(first: int, count: int) -> list[bytes]:
    """The six byte columns of the u48 fields ``first``, ``first + 1``, ... (``count`` numbers): column ``k``
    holds byte ``k`` (big-endian) of every number.

    The top four bytes change only when the low 16 bits wrap, so they are
    runs of one byte; the low two are slices of a table.  No Python step
    per number and no big-integer arithmetic: a 500-frame column costs its
    six strided copies and little more.
    """
    low = first & 0xFFFF
    end = low + count
    if end <= len(_HIGH_BYTES):
        columns_45 = [_HIGH_BYTES[low:end], _LOW_BYTES[low:end]]
    else:  # more numbers than the table cycles through: only very large columns
        cycles = end // (1 << 16) + 1
        columns_45 = [(_HIGH_BYTES[:1 << 16] * cycles)[low:end], (_LOW_BYTES[:1 << 16] * cycles)[low:end]]
    if end <= 1 << 16:  # the low 16 bits do not wrap: one top for all (the usual case)
        top = (first >> 16).to_bytes(4, "big")
        return [top[k:k + 1] * count for k in range(4)] + columns_45
    stretches = []  # (top four bytes, how many numbers have them)
    high, left, length = first >> 16, count, (1 << 16) - low
    while left:
        stretches.append((high, length))
        high, left = high + 1, left - length
        length = min(left, 1 << 16)
    columns = [b"".join(bytes(((value >> shift) & 0xFF,)) * length for value, length in stretches)
               for shift in (24, 16, 8, 0)]
    return columns + columns_45


def put_consecutive_u48(buf: bytearray, offset: int, step: int, first: int, count: int) -> None:
    """Write ``first``, ``first + 1``, ... as the 6-byte field at ``offset`` of ``count`` records of ``step`` bytes."""
    end = offset + step * count
    if count < _FEW:
        for at, number in zip(range(offset, end, step), range(first, first + count)):
            buf[at:at + 6] = number.to_bytes(6, "big")
        return
    for k, column in enumerate(consecutive_u48_columns(first, count)):
        buf[offset + k:end:step] = column


def consecutive_u48(data: bytes | bytearray | memoryview, offset: int, step: int, count: int) -> int:
    """The first number when the 6-byte fields at ``offset`` of ``count`` records of ``step`` bytes count up by
    one from it (tags of a batch, sequences of a datagram); 0 when they do not, or start at 0."""
    if count < 1 or len(data) < step * count:
        return 0
    first = int.from_bytes(data[offset:offset + 6], "big")
    if not first or first + count - 1 > MAX_SEQUENCE:
        return 0
    end = offset + step * count
    if count < _FEW:
        for at, number in zip(range(offset + step, end, step), range(first + 1, first + count)):
            if data[at:at + 6] != number.to_bytes(6, "big"):
                return 0
        return first
    for k, column in enumerate(consecutive_u48_columns(first, count)):
        if data[offset + k:end:step] != column:
            return 0
    return first


def _confirm_columns(datagram: bytes | bytearray | memoryview, count: int) -> tuple[array[int], array[int]]:
    tags = u48_column(datagram, 1, CONFIRM_SIZE, count)
    seqs = u48_column(datagram, 7, CONFIRM_SIZE, count)
    if 0 in tags or 0 in seqs:
        raise ProtocolError("bad value", "a packed CONFIRM datagram holds a zero tag or sequence")
    return tags, seqs


def decode_confirms(datagram: bytes | bytearray | memoryview) -> list[tuple[int, int]]:
    """The (tag, sequence) pairs of a datagram of packed CONFIRM frames; ``ProtocolError`` if any is not one."""
    return list(zip(*_confirm_columns(datagram, _confirm_count(datagram))))


Run = tuple[int, int, int]  # (first tag, count, first sequence): tags first.. got sequences first sequence..


def decode_confirm_runs(datagram: bytes | bytearray | memoryview) -> list[Run]:
    """A datagram of packed CONFIRM frames as runs; ``ProtocolError`` if any frame is not a CONFIRM.

    The backbone numbers a batch's consecutive tags consecutively, so a
    CONFIRM datagram is usually one run, recognised without a step per frame.
    """
    count = _confirm_count(datagram)
    first_tag = consecutive_u48(datagram, 1, CONFIRM_SIZE, count)
    first_seq = consecutive_u48(datagram, 7, CONFIRM_SIZE, count) if first_tag else 0
    if first_seq:
        return [(first_tag, count, first_seq)]
    return pair_runs(zip(*_confirm_columns(datagram, count)))


def pair_runs(pairs: Iterable[tuple[int, int]]) -> list[Run]:
    """(tag, sequence) pairs as runs: consecutive tags with consecutive sequences join one run."""
    runs: list[Run] = []
    first = count = seq = 0
    for tag, number in pairs:
        if count and tag == first + count and number == seq + count:
            count += 1
            continue
        if count:
            runs.append((first, count, seq))
        first, count, seq = tag, 1, number
    if count:
        runs.append((first, count, seq))
    return runs


def _confirm_count(datagram: bytes | bytearray | memoryview) -> int:
    size = len(datagram)
    if not size or size % CONFIRM_SIZE:
        raise ProtocolError("bad size", f"{size} bytes is not a whole number of CONFIRM frames")
    count = size // CONFIRM_SIZE
    if datagram[0::CONFIRM_SIZE] != _CONFIRM_TYPES[:count]:
        raise ProtocolError("bad value", "a packed CONFIRM datagram holds another frame")
    return count


def _encode_range(frame_type: int, addr: str, port: int, from_seq: int, to_seq: int) -> bytes:
    _check_port(port)
    _check_u48("from_seq", from_seq, 1)
    _check_u48("to_seq", to_seq, 1)
    if from_seq > to_seq:
        raise ProtocolError("bad range", f"from_seq {from_seq} > to_seq {to_seq}")
    return _RANGE.pack(
        frame_type, _pack_addr(addr), port,
        from_seq >> 32, from_seq & 0xFFFFFFFF, to_seq >> 32, to_seq & 0xFFFFFFFF,
    )


def encode_keepalive(frame: Keepalive) -> bytes:
    _check_port(frame.port)
    addr = _pack_addr(frame.addr)
    if frame.legacy:
        if frame.flags or frame.token != bytes(TOKEN_SIZE) or frame.cookie:
            raise ProtocolError("bad value", "a legacy KEEPALIVE carries no flags, no token and no cookie")
        return _LEGACY_KEEPALIVE.pack(KEEPALIVE, addr, frame.port)
    _check_u48("flags", frame.flags)
    if len(frame.token) != TOKEN_SIZE:
        raise ProtocolError("bad value", f"token must be {TOKEN_SIZE} bytes")
    if frame.cookie and len(frame.cookie) != COOKIE_SIZE:
        raise ProtocolError("bad value", f"a cookie is {COOKIE_SIZE} bytes")
    return _KEEPALIVE.pack(
        KEEPALIVE, addr, frame.port, frame.flags >> 32, frame.flags & 0xFFFFFFFF, frame.token
    ) + frame.cookie


def encode(frame: Frame) -> bytes:
    """Encode one frame as the bytes of one datagram (or one packed frame)."""
    if isinstance(frame, Deliver):
        return encode_deliver(frame.seq, frame.data)
    if isinstance(frame, Push):
        return encode_push(frame.data, frame.tag)
    if isinstance(frame, Confirm):
        return encode_confirm(frame.tag, frame.seq)
    if isinstance(frame, Request):
        return _encode_range(REQUEST, frame.addr, frame.port, frame.from_seq, frame.to_seq)
    if isinstance(frame, Forward):
        return _encode_range(FORWARD, frame.addr, frame.port, frame.from_seq, frame.to_seq)
    if isinstance(frame, Keepalive):
        return encode_keepalive(frame)
    if isinstance(frame, KeepaliveAck):
        if len(frame.token) != TOKEN_SIZE:
            raise ProtocolError("bad value", f"token must be {TOKEN_SIZE} bytes")
        if frame.cookie and len(frame.cookie) != COOKIE_SIZE:
            raise ProtocolError("bad value", f"a cookie is {COOKIE_SIZE} bytes")
        if frame.head is None:
            return bytes((KEEPALIVE_ACK,)) + frame.token + frame.cookie
        _check_u48("head", frame.head)
        return (bytes((KEEPALIVE_ACK,)) + frame.token + _U48.pack(frame.head >> 32, frame.head & 0xFFFFFFFF)
                + frame.cookie)
    raise TypeError(f"not a frame: {frame!r}")


def pack(frames: Iterable[Frame]) -> bytes:
    """Encode several DELIVER/PUSH/CONFIRM frames back to back into one datagram."""
    parts = []
    for frame in frames:
        if not isinstance(frame, PACKABLE):
            raise ProtocolError("not packable", f"{type(frame).__name__} must be alone in a datagram")
        parts.append(encode(frame))
    datagram = b"".join(parts)
    if not datagram:
        raise ProtocolError("empty", "no frames to pack")
    if len(datagram) > MAX_DATAGRAM:
        raise ProtocolError("oversize", f"{len(datagram)} bytes exceed one datagram ({MAX_DATAGRAM})")
    return datagram


def pack_greedy(encoded: Iterable[bytes], limit: int = MAX_DATAGRAM) -> list[bytes]:
    """Group already-encoded packable frames into as few datagrams of at most ``limit`` bytes as fit."""
    if isinstance(encoded, list) and encoded:
        sizes = set(map(len, encoded))
        if len(sizes) == 1:  # a publisher's batch is often uniform: whole slices, no loop per frame
            per = max(1, limit // sizes.pop())
            return [b"".join(encoded[start:start + per]) for start in range(0, len(encoded), per)]
    out: list[bytes] = []
    batch: list[bytes] = []
    size = 0
    for frame in encoded:
        if size + len(frame) > limit and batch:
            out.append(b"".join(batch))
            batch, size = [], 0
        batch.append(frame)
        size += len(frame)
    if batch:
        out.append(b"".join(batch))
    return out


# ---------------------------------------------------------------- decoding


def scan(datagram: bytes | bytearray | memoryview, frame_type: int) -> tuple[list[tuple[int, int, int]], str | None]:
    """Locate the packed DELIVER or PUSH frames of one datagram without copying.

    Returns ``(spans, error)``: ``spans`` holds ``(start, end, value)`` for every
    well-formed frame up to the first malformed one, ``value`` being the sequence
    (DELIVER) or tag (PUSH); ``error`` is the reason the scan stopped early, or
    None.  The backbone uses this on its hot path, so it builds no objects.
    """
    spans: list[tuple[int, int, int]] = []
    size = len(datagram)
    if not size:
        return spans, "empty"
    offset = 0
    unpack_from = _HEADER.unpack_from
    while offset < size:
        if size - offset < FRAME_HEADER:
            return spans, "truncated"
        kind, length, high, low = unpack_from(datagram, offset)
        if kind != frame_type:
            return spans, "mixed frame types" if spans else "unknown type"
        if length > MAX_PAYLOAD:
            return spans, "oversize"
        end = offset + FRAME_HEADER + length
        if end > size:
            return spans, "truncated"
        spans.append((offset, end, (high << 32) | low))
        offset = end
    return spans, None


def consecutive_first(spans: list[tuple[int, int, int]]) -> int:
    """The first sequence when :func:`scan`'s DELIVER ``spans`` count up by one from a valid (non-zero) one, else 0."""
    first = spans[0][2] if spans else 0
    count = len(spans)
    if first < 1 or spans[-1][2] != first + count - 1 or [seq for _, _, seq in spans] != list(
            range(first, first + count)):
        return 0
    return first


def _decode_one_fixed(datagram: bytes, kind: int) -> Frame:
    size = len(datagram)
    if kind in (REQUEST, FORWARD):
        if size != RANGE_SIZE:
            raise ProtocolError("bad size", f"{frame_name(kind)} is {RANGE_SIZE} bytes, got {size}")
        _, addr, port, fh, fl, th, tl = _RANGE.unpack(datagram)
        from_seq, to_seq = (fh << 32) | fl, (th << 32) | tl
        if from_seq < 1 or from_seq > to_seq:
            raise ProtocolError("bad range", f"{from_seq}..{to_seq}")
        cls = Request if kind == REQUEST else Forward
        return cls(inet_ntoa(addr), port, from_seq, to_seq)
    if kind == KEEPALIVE:
        if size == KEEPALIVE_SIZE:
            _, addr, port, fh, fl, token = _KEEPALIVE.unpack(datagram)
            return Keepalive(inet_ntoa(addr), port, (fh << 32) | fl, token)
        if size == KEEPALIVE_COOKIE_SIZE:
            _, addr, port, fh, fl, token = _KEEPALIVE.unpack_from(datagram)
            return Keepalive(inet_ntoa(addr), port, (fh << 32) | fl, token, cookie=bytes(datagram[KEEPALIVE_SIZE:]))
        if size == LEGACY_KEEPALIVE_SIZE:
            _, addr, port = _LEGACY_KEEPALIVE.unpack(datagram)
            return Keepalive(inet_ntoa(addr), port, legacy=True)
        raise ProtocolError(
            "bad size",
            f"KEEPALIVE is {KEEPALIVE_SIZE}, {KEEPALIVE_COOKIE_SIZE} or {LEGACY_KEEPALIVE_SIZE} bytes, got {size}"
        )
    if kind == KEEPALIVE_ACK:
        token = bytes(datagram[1:KEEPALIVE_ACK_SIZE])
        if size == KEEPALIVE_ACK_SIZE:
            return KeepaliveAck(token)
        if size == KEEPALIVE_ACK_SIZE + COOKIE_SIZE:
            return KeepaliveAck(token, cookie=bytes(datagram[KEEPALIVE_ACK_SIZE:]))
        if size in (KEEPALIVE_ACK_HEAD_SIZE, KEEPALIVE_ACK_HEAD_SIZE + COOKIE_SIZE):
            high, low = _U48.unpack_from(datagram, KEEPALIVE_ACK_SIZE)
            return KeepaliveAck(token, (high << 32) | low, bytes(datagram[KEEPALIVE_ACK_HEAD_SIZE:]))
        raise ProtocolError(
            "bad size", f"KEEPALIVE-ACK is {KEEPALIVE_ACK_SIZE} or {KEEPALIVE_ACK_HEAD_SIZE} bytes "
                        f"(each with {COOKIE_SIZE} more for a cookie), got {size}"
        )
    raise ProtocolError("unknown type", f"frame type 0x{kind:02x}")


def _decode_packed(datagram: bytes, strict: bool) -> tuple[list[Frame], ProtocolError | None]:
    frames: list[Frame] = []
    offset = 0
    size = len(datagram)
    while offset < size:
        kind = datagram[offset]
        if kind == CONFIRM:
            if size - offset < CONFIRM_SIZE:
                error = ProtocolError("truncated", "CONFIRM frame cut short")
                break
            _, th, tl, sh, sl = _CONFIRM.unpack_from(datagram, offset)
            tag, seq = (th << 32) | tl, (sh << 32) | sl
            if not tag or not seq:
                error = ProtocolError("bad value", "CONFIRM with zero tag or sequence")
                break
            frames.append(Confirm(tag, seq))
            offset += CONFIRM_SIZE
            continue
        if kind not in (DELIVER, PUSH):
            error = ProtocolError("unknown type" if kind not in _NAMES else "not packable",
                                  f"{frame_name(kind)} frame inside a packed datagram")
            break
        if size - offset < FRAME_HEADER:
            error = ProtocolError("truncated", f"{frame_name(kind)} header cut short")
            break
        _, length, high, low = _HEADER.unpack_from(datagram, offset)
        if length > MAX_PAYLOAD:
            error = PayloadTooLarge(length)
            break
        end = offset + FRAME_HEADER + length
        if end > size:
            error = ProtocolError("truncated", f"{frame_name(kind)} LENGTH {length} runs past the datagram")
            break
        value = (high << 32) | low
        data = bytes(datagram[offset + FRAME_HEADER:end])
        if kind == DELIVER:
            if not value:
                error = ProtocolError("bad value", "DELIVER with sequence 0")
                break
            frames.append(Deliver(value, data))
        else:
            frames.append(Push(data, value))
        offset = end
    else:
        return frames, None
    if strict:
        raise error
    return frames, error


def decode(datagram: bytes) -> list[Frame]:
    """Decode every frame of one datagram; any malformed part raises ProtocolError."""
    if not datagram:
        raise ProtocolError("empty", "empty datagram")
    kind = datagram[0]
    if kind in (DELIVER, PUSH, CONFIRM):
        return _decode_packed(datagram, strict=True)[0]
    return [_decode_one_fixed(datagram, kind)]


def decode_lenient(datagram: bytes) -> tuple[list[Frame], ProtocolError | None]:
    """Decode the well-formed frames up to the first malformed one, and say why it stopped."""
    if not datagram:
        return [], ProtocolError("empty", "empty datagram")
    kind = datagram[0]
    if kind in (DELIVER, PUSH, CONFIRM):
        return _decode_packed(datagram, strict=False)
    try:
        return [_decode_one_fixed(datagram, kind)], None
    except ProtocolError as exc:
        return [], exc
