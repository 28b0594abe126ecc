"""A plain message's MSG frame read straight from its encoded envelope: no ``Envelope`` object per delivery.

Almost every message a NATS subscriber receives is plain: type UPDATE,
status OK, a subject, perhaps a reply subject, and the payload, with neither
session, header block nor digest.  Its MSG frame (``MSG <subject> <sid>
[reply] <size>\\r\\n<payload>\\r\\n``) needs nothing but those byte ranges
of the envelope as it came from the backbone, so the gateway reads their
offsets here instead of decoding the envelope into an object, which with
its frame cost about 2.3 µs of a NATS gateway's 7 per message
(docs/gateways.md).  Anything else (another type or status, a session, a
header block, a digest, a damaged envelope) is left to the general decoder,
:func:`fyrehose.subjects.envelope.decode`: this step decides nothing of its
own.  The caller checks the subject and reply it gets, as the decoder does.
"""
from __future__ import annotations

_MAGIC0, _MAGIC1 = 0xFB, 0x1E  # envelope.MAGIC, byte by byte: constants the compiled build knows
_VERSION, _VERSION_HEADERS = 1, 2
_FLAG_REPLY = 0x1
_FIXED_SIZE = 8  # envelope.FIXED_SIZE


def plain_fields(data: bytes) -> tuple[bytes, bytes | None, int] | None:
    """(subject, reply subject or None, where the payload starts) of a plain message's envelope; None otherwise.

    Plain: type UPDATE and status OK, no flag but the reply's; the subject
    and reply as raw bytes, neither decoded nor checked yet.
    """
    size = len(data)
    if (size < _FIXED_SIZE or data[0] != _MAGIC0 or data[1] != _MAGIC1
            or (data[2] != _VERSION and data[2] != _VERSION_HEADERS) or data[3] != 0 or data[4] != 0):
        return None
    flags = data[5]
    if flags & ~_FLAG_REPLY:
        return None
    offset = _FIXED_SIZE + ((data[6] << 8) | data[7])
    if offset > size:
        return None
    subject = data[_FIXED_SIZE:offset]
    if not flags:
        return (subject, None, offset)
    if offset + 2 > size:
        return None
    start = offset + 2
    offset = start + ((data[offset] << 8) | data[offset + 1])
    if offset > size:
        return None
    return (subject, data[start:offset], offset)


def msg_tail(data: bytes, start: int, reply: bytes | None) -> bytes:
    """What follows the sid in the MSG of payload ``data[start:]``: ``[ <reply>] <size>\\r\\n<payload>\\r\\n``."""
    if reply:
        return b" %s %d\r\n%s\r\n" % (reply, len(data) - start, data[start:])
    return b" %d\r\n%s\r\n" % (len(data) - start, data[start:])
