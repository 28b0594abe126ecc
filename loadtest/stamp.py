"""The payload of a load-test message: a marker and the publish time, padded to the wanted size.

Subscribers read the publish time back to measure publish-to-deliver latency
and to attribute each message to the load phase it was published in.  The
marker keeps other traffic on the same backbone out of the measurement.
"""
from __future__ import annotations

import struct

MARKER = b"FHLT"
_STAMP = struct.Struct(">4sQ")
MIN_SIZE = _STAMP.size  # 12 bytes


def stamp(published_ns: int, size: int) -> bytes:
    """A payload of ``size`` bytes carrying ``published_ns`` (nanoseconds since the epoch)."""
    if size < MIN_SIZE:
        raise ValueError(f"a load-test payload needs at least {MIN_SIZE} bytes")
    return _STAMP.pack(MARKER, published_ns) + bytes(size - MIN_SIZE)


def published_ns(payload: bytes | memoryview) -> int | None:
    """The publish time stamped into ``payload``; None for any payload this module did not make."""
    if len(payload) < MIN_SIZE:
        return None
    marker, value = _STAMP.unpack_from(payload)
    return value if marker == MARKER else None
