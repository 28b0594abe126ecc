"""The optional envelope inside a message's DATA: subject, type/status, reply subject, session, headers, digest.

Binary, versioned and self-identifying: an envelope starts with the bytes
``FB 1E`` (0xFB never begins UTF-8 text, so text and JSON payloads are never
mistaken for one) and a version byte.  Anything else is a raw payload, which
stays valid and simply has no subject.

Layout (big endian)::

    MAGIC FB 1E | VERSION 01/02 | TYPE u8 | STATUS u8 | FLAGS u8 | SUBJECT_LEN u16 | SUBJECT
    [FLAG_REPLY:   REPLY_LEN u16 | REPLY]
    [FLAG_SESSION: SESSION_LEN u8 | SESSION | SEQNO u64]
    [FLAG_HEADERS: HEADERS_LEN u32 | HEADERS]          (version 2 only)
    [FLAG_DIGEST:  DIGEST_LEN u8 | DIGEST]
    DATA (the rest)

HEADERS is an opaque header block carried byte for byte (the NATS gateways
put the client's ``NATS/1.0`` block there, status line and repeated names
included).  An envelope with headers is version 2; every other envelope is
still written as version 1, so readers that know only version 1 keep reading
everything but header-carrying messages, which they skip as unknown versions
instead of mistaking the header block for data.  Version 1 ignores the
FLAG_HEADERS bit, as it ignores every unknown bit.

Type and status follow the type/status table of the cache protocol the
subject layer implements (docs/protocol.md, "Envelope").  Lengths count
bytes; subject and reply are UTF-8 subjects as :func:`check_subject` defines
them (no wildcards); SESSION is ``user.NONCE``; SEQNO increases per session;
DIGEST is the HMAC of docs/security.md.  Unknown FLAGS bits are ignored.
:func:`decode` treats an envelope whose subject or reply breaks those rules
as damaged (None), so a receiver never matches a wildcard coming off the wire.
"""
from __future__ import annotations

import enum
import functools
import re
import struct
from dataclasses import dataclass

MAGIC = b"\xfb\x1e"
VERSION = 1
FLAG_REPLY = 0x1
FLAG_SESSION = 0x2
FLAG_DIGEST = 0x4
FLAG_HEADERS = 0x8
VERSION_HEADERS = 2  # the first version that carries FLAG_HEADERS
MAX_SUBJECT = 1024

_FIXED = struct.Struct(">2sBBBBH")  # magic, version, type, status, flags, subject length
_FIXED_SIZE = 8  # _FIXED.size, as a constant the compiled build knows
_MAGIC0 = 0xFB
_MAGIC1 = 0x1E
FIXED_SIZE = _FIXED_SIZE  # bytes of every envelope before its subject
_EMPTY_TOKEN_OR_SPACE = re.compile(r"\A\.|\.\.|\.\Z|\s")  # \s is exactly str.isspace()
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")


class MsgType(enum.IntEnum):
    UPDATE = 0
    INITIAL = 1
    SNAP = 2
    START = 3
    STOP = 4
    DROP = 5
    VERIFY = 6
    TRANSIENT = 7


class Status(enum.IntEnum):
    OK = 0
    ACK = 1
    VERIFY = 2
    NOT_FOUND = 3
    TEMP_UNAVAIL = 4
    BAD_ACCESS = 5
    BAD_NAME = 6
    FEED_DOWN = 7
    STALE = 8
    PERM_DENIED = 9
    CONFLATED = 10
    FEED_SWITCH = 11
    NOSUBSCRIBERS = 12
    EXPIRED = 13
    RELOCATE = 14
    PREEMPTED = 15


_TYPES = tuple(MsgType)  # by value: the values count up from 0, so decoding indexes instead of calling the enum
_STATUSES = tuple(Status)
assert all(index == value for values in (_TYPES, _STATUSES) for index, value in enumerate(values))
_TYPE_COUNT = 8  # len(_TYPES), len(_STATUSES): constants the compiled build knows
_STATUS_COUNT = 16
assert _FIXED.size == _FIXED_SIZE and len(_TYPES) == _TYPE_COUNT and len(_STATUSES) == _STATUS_COUNT


_new = object.__new__
_set = object.__setattr__  # what a frozen dataclass's own __init__ sets its fields with


class EnvelopeError(ValueError):
    """An envelope that cannot be built (bad subject, oversize field)."""


@dataclass(frozen=True, slots=True)
class Envelope:
    subject: str
    data: bytes = b""
    type: MsgType = MsgType.UPDATE
    status: Status = Status.OK
    reply: str | None = None
    session: str | None = None
    seqno: int | None = None  # with session: per-session sequence, bound into the digest
    digest: bytes | None = None
    headers: bytes | None = None  # an opaque header block (a NATS HPUB's), carried byte for byte


def check_subject(subject: str, *, wildcards: bool = False) -> bytes:
    """Validate a dot-separated subject (``a.b.c``) and return its UTF-8 bytes.

    Tokens are non-empty and hold no whitespace; ``*`` and ``>`` are wildcards,
    allowed only in subscription patterns (``>`` only as the last token).
    Subjects without wildcards are remembered (a bounded cache): a gateway
    checks the same few subjects several times per message.
    """
    return _checked(subject, wildcards) if wildcards else _checked_subject(subject)


@functools.lru_cache(maxsize=1024)
def _checked_subject(subject: str) -> bytes:
    return _checked(subject, False)


def _checked(subject: str, wildcards: bool) -> bytes:
    raw = subject.encode("utf-8")
    if not raw or len(raw) > MAX_SUBJECT:
        raise EnvelopeError(f"subject must be 1..{MAX_SUBJECT} bytes")
    if _EMPTY_TOKEN_OR_SPACE.search(subject):
        raise EnvelopeError(f"bad subject {subject!r}: empty token or whitespace")
    if "*" not in subject and ">" not in subject:
        return raw  # the common case: no token can be a wildcard
    tokens = subject.split(".")
    for index, token in enumerate(tokens):
        if token in ("*", ">"):
            if not wildcards:
                raise EnvelopeError(f"wildcard in subject {subject!r}: only subscriptions may use them")
            if token == ">" and index != len(tokens) - 1:
                raise EnvelopeError(f"'>' must be the last token in {subject!r}")
        elif "*" in token or ">" in token:
            raise EnvelopeError(f"wildcard characters inside a token of {subject!r}")
    return raw


def encode(envelope: Envelope) -> bytes:
    return _encode(envelope, envelope.digest)


def encode_unsigned(envelope: Envelope) -> bytes:
    """The envelope as encoded without its digest: the bytes a digest is computed over."""
    return _encode(envelope, None)


def _encode(envelope: Envelope, digest: bytes | None) -> bytes:
    subject = check_subject(envelope.subject)
    flags = 0
    parts = [b""]
    if envelope.reply is not None:
        reply = check_subject(envelope.reply)
        flags |= FLAG_REPLY
        parts.append(_U16.pack(len(reply)) + reply)
    if envelope.session is not None:
        session = envelope.session.encode("utf-8")
        if len(session) > 255 or envelope.seqno is None or not 0 <= envelope.seqno < 1 << 64:
            raise EnvelopeError("a session needs a name of at most 255 bytes and a 64-bit seqno")
        flags |= FLAG_SESSION
        parts.append(bytes((len(session),)) + session + _U64.pack(envelope.seqno))
    elif envelope.seqno is not None:
        raise EnvelopeError("seqno without session")
    version = VERSION
    if envelope.headers is not None:
        if len(envelope.headers) >= 1 << 32:
            raise EnvelopeError("header block of 4 GiB or more")
        version = VERSION_HEADERS
        flags |= FLAG_HEADERS
        parts.append(_U32.pack(len(envelope.headers)) + envelope.headers)
    if digest is not None:
        if len(digest) > 255:
            raise EnvelopeError("digest longer than 255 bytes")
        flags |= FLAG_DIGEST
        parts.append(bytes((len(digest),)) + digest)
    parts[0] = _FIXED.pack(MAGIC, version, int(envelope.type), int(envelope.status), flags, len(subject)) + subject
    parts.append(envelope.data)
    return b"".join(parts)


def is_envelope(payload: bytes) -> bool:
    return payload[:2] == MAGIC


def decode(payload: bytes, known_subjects: dict[bytes, str] | None = None) -> Envelope | None:
    """The envelope in ``payload``, or None for a raw payload (or one whose envelope is damaged).

    ``known_subjects`` (bytes to subject) remembers the subjects already
    checked, for a reader that sees a few subjects many times (the cache):
    each is then decoded and checked once.  Its owner bounds its size.
    Lengths are read byte by byte into integer locals rather than through
    ``struct``: the compiled build (docs/architecture.md) turns them into
    machine integers.
    """
    data = payload if type(payload) is bytes else bytes(payload)  # any other buffer as a copy
    size = len(data)
    if size < _FIXED_SIZE or data[0] != _MAGIC0 or data[1] != _MAGIC1:
        return None
    version = data[2]
    if version != VERSION and version != VERSION_HEADERS:
        return None
    kind = data[3]
    status = data[4]
    flags = data[5]
    subject_len = (data[6] << 8) | data[7]
    offset = _FIXED_SIZE + subject_len
    if offset > size or kind >= _TYPE_COUNT or status >= _STATUS_COUNT:
        return None
    raw_subject = data[_FIXED_SIZE:offset]
    subject = known_subjects.get(raw_subject) if known_subjects is not None else None
    try:
        checked = subject is not None
        if subject is None:
            subject = raw_subject.decode("utf-8")
        reply = session = seqno = digest = headers = None
        if flags & FLAG_REPLY:
            if offset + 2 > size:
                return None
            length = (data[offset] << 8) | data[offset + 1]
            offset += 2 + length
            if offset > size:
                return None
            reply = data[offset - length:offset].decode("utf-8")
        if flags & FLAG_SESSION:
            if offset >= size:
                return None
            length = data[offset]
            if offset + 1 + length + 8 > size:
                return None
            session = data[offset + 1:offset + 1 + length].decode("utf-8")
            seqno = int.from_bytes(data[offset + 1 + length:offset + 9 + length], "big")
            offset += 9 + length
        if version == VERSION_HEADERS and flags & FLAG_HEADERS:
            if offset + 4 > size:
                return None
            length = int.from_bytes(data[offset:offset + 4], "big")  # shifts by 24 would overflow a C int
            offset += 4 + length
            if offset > size:
                return None
            headers = bytes(data[offset - length:offset])
        if flags & FLAG_DIGEST:
            if offset >= size:
                return None
            length = data[offset]
            offset += 1 + length
            if offset > size:
                return None
            digest = bytes(data[offset - length:offset])
        if not checked:
            check_subject(subject)  # a wildcard or empty token on the wire is damage, not a subject
            if known_subjects is not None:
                known_subjects[bytes(raw_subject)] = subject
        if reply is not None:
            check_subject(reply)
    except (UnicodeDecodeError, EnvelopeError):
        return None
    opened = _new(Envelope)  # the fields set directly: the frozen dataclass's __init__ costs more than the rest
    _set(opened, "subject", subject)
    _set(opened, "data", bytes(data[offset:]))
    _set(opened, "type", _TYPES[kind])
    _set(opened, "status", _STATUSES[status])
    _set(opened, "reply", reply)
    _set(opened, "session", session)
    _set(opened, "seqno", seqno)
    _set(opened, "digest", digest)
    _set(opened, "headers", headers)
    return opened


def peek_subject(payload: bytes) -> str | None:
    """Only the subject (None for raw payloads): cheap enough for the journal's hot path."""
    data = payload if type(payload) is bytes else bytes(payload)  # any other buffer as a copy
    size = len(data)
    if size < _FIXED_SIZE or data[0] != _MAGIC0 or data[1] != _MAGIC1:
        return None
    version = data[2]
    if version != VERSION and version != VERSION_HEADERS:
        return None
    end = _FIXED_SIZE + ((data[6] << 8) | data[7])
    if end > size:
        return None
    try:
        return data[_FIXED_SIZE:end].decode("utf-8")
    except UnicodeDecodeError:
        return None
