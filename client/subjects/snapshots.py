"""The record's sequence in a ``_SNAP`` answer: asked for in the request, carried as an envelope header.

A cache knows, per record, the backbone sequence of the message that last
changed it; HTTP needs that number for ``ETag`` and ``Fyrehose-Sequence``.
It travels in the answer's header block (``Fyrehose-Sequence: N``, in the
``NATS/1.0`` form the envelope's header block already holds), which makes the
answer a version-2 envelope.  A reader that knows only version 1 skips those,
so the cache adds the header only when the request's data asks for it with
:data:`WITH_SEQUENCE`: older requesters send no data and get the very answer
they always got, and an older cache, which ignores a snapshot's data, answers
without the header (:func:`record_sequence` then gives None).
"""
from __future__ import annotations

import json

from fyrehose.subjects.envelope import Envelope

WITH_SEQUENCE = b'{"sequence":true}'  # the data of a _SNAP request whose answer should carry the sequence
HEADER = "Fyrehose-Sequence"
_HEADER_LINE = HEADER.lower().encode() + b":"
_MAX_DIGITS = 20  # 2**64 - 1


def wants_sequence(data: bytes) -> bool:
    """Whether a ``_SNAP`` request's data asks for the sequence; any other data is ignored, as it always was."""
    if not data:
        return False
    try:
        value = json.loads(data)
    except (ValueError, RecursionError):  # RecursionError: absurdly nested input off the wire
        return False
    return isinstance(value, dict) and value.get("sequence") is True


def sequence_headers(seq: int) -> bytes:
    """The header block an answer carries for a record last changed by the message at ``seq``."""
    return b"NATS/1.0\r\n%s: %d\r\n\r\n" % (HEADER.encode(), seq)


def record_sequence(answer: Envelope) -> int | None:
    """The sequence a cache's answer carries, or None (no header: not asked for, no record, or an older cache)."""
    if answer.headers is None:
        return None
    for line in answer.headers.split(b"\r\n")[1:]:
        if line.lower().startswith(_HEADER_LINE):
            value = line[len(_HEADER_LINE):].strip()
            if value.isdigit() and len(value) <= _MAX_DIGITS:
                return int(value)
            return None
    return None
