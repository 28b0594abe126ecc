"""A plain PUB read in one compiled step: the commonest NATS operation, without the general parser's splitting.

``PUB <subject> <size>\\r\\n<payload>\\r\\n``, one space between the fields,
a subject of printable ASCII and the whole payload already received, is what
every publishing client sends for a message without reply or headers.  Read
by the general parser (:mod:`fyrehose.gateways.nats.protocol`) it costs a
copy of the line, two splits, a case fold and a size parse, about 2 µs of
a NATS gateway's 11 per message; here it is one pass over the bytes
(compiled, docs/architecture.md).  Anything else, and anything not wholly
received yet, is left to the general parser, which gives the same operation
or the same error for it: this step decides nothing of its own.
"""
from __future__ import annotations

_P, _U, _B, _SPACE, _CR, _LF, _ZERO, _NINE, _TILDE = 80, 85, 66, 32, 13, 10, 48, 57, 126
_MAX_DIGITS = 10  # more digits are beyond any payload limit: the general parser says so


def plain_pub(buffer: bytearray, pos: int, max_payload: int, max_line: int) -> tuple[str, bytes, int] | None:
    """(subject, payload, where the next operation starts) of the plain PUB at ``pos``; None for anything else.

    ``max_line`` bounds the control line as the general parser does (from
    ``pos`` to its LF); a larger payload than ``max_payload`` is left to it too.
    """
    size = len(buffer)
    if (size - pos < 10 or buffer[pos] != _P or buffer[pos + 1] != _U or buffer[pos + 2] != _B
            or buffer[pos + 3] != _SPACE):
        return None
    start = pos + 4
    # the line's LF, found first (at C speed) so that a line arriving in pieces is not scanned again per piece
    end = buffer.find(b"\n", start, pos + max_line + 1)  # the LF may sit at pos + max_line at the most
    if end < 0:
        return None
    index = start
    while index < end and _SPACE < buffer[index] <= _TILDE:
        index += 1
    if index == start or buffer[index] != _SPACE:
        return None
    subject_end = index
    index += 1
    digits_start = index
    total = 0
    while index < end and _ZERO <= buffer[index] <= _NINE:
        if index - digits_start == _MAX_DIGITS:
            return None
        total = total * 10 + (buffer[index] - _ZERO)
        index += 1
    if index == digits_start or index + 1 != end or buffer[index] != _CR:
        return None
    payload_start = index + 2
    payload_end = payload_start + total
    if total > max_payload or payload_end + 2 > size or buffer[payload_end] != _CR or buffer[payload_end + 1] != _LF:
        return None
    return (buffer[start:subject_end].decode("ascii"), bytes(buffer[payload_start:payload_end]), payload_end + 2)
