"""Server-Sent Events: one event per backbone message, byte-exact for any payload.

``id:`` is the backbone sequence (a reconnecting client sends it back as
``Last-Event-ID``), ``event:`` the subject.  A payload that is UTF-8 without
CR or NUL goes as ``data:`` lines, one per line of the payload, which the
client joins with LF into exactly the payload.  Any other payload goes
base64-encoded, and the event type then says so: ``<subject> base64``
(subjects hold no whitespace, so the two forms cannot be confused).
Pure: messages in, bytes out.
"""
from __future__ import annotations

import base64

BASE64_SUFFIX = " base64"


def is_text(data: bytes) -> bool:
    """Whether SSE carries ``data`` as it is (UTF-8, no CR or NUL: the SSE parser would alter those)."""
    if b"\r" in data or b"\0" in data:
        return False
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def event(seq: int, subject: str, data: bytes) -> bytes:
    """One complete event for message ``seq``."""
    if is_text(data):
        kind = subject.encode()
        lines = data.split(b"\n")
    else:
        kind = subject.encode() + BASE64_SUFFIX.encode()
        lines = [base64.b64encode(data)]
    body = b"".join(b"data: " + line + b"\n" for line in lines)
    return b"id: %d\nevent: %s\n%s\n" % (seq, kind, body)


def comment(text: str) -> bytes:
    """A comment line: ignored by SSE clients, shown by raw readers (``curl -N``)."""
    return b": " + text.replace("\r", " ").replace("\n", " ").encode() + b"\n\n"


def parse_last_event_id(value: bytes | None) -> int | None:
    """The sequence in a ``Last-Event-ID`` header; None when absent or not a sequence."""
    if value is None or not value.strip().isdigit():
        return None
    seq = int(value)
    return seq if seq > 0 else None
