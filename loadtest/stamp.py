"""The payload of a load-test message: a marker and the publish time, padded to the wanted size.

Subscribers read the publish time back to measure publish-to-deliver latency
and to attribute each message to the load phase it was published in.  The
marker keeps other traffic on the same backbone out of the measurement.
"""
from __future__ import annotations

import struct
import sys
from array import array
from itertools import groupby

from fyrehose.protocol import codec
from fyrehose.protocol.frame_run import FrameRun

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


def run_stamps(run: FrameRun) -> list[tuple[int, int, int]] | None:
    """The publish times of a run of frames, as (published_ns, count, lowest sequence) per stretch of frames
    with one stamp (a ``--batch`` request is one); None unless every payload is a stamped one.

    Reads the marker and the stamp column with strided slices: a datagram's
    stamps for the cost of a few of its frames.
    """
    data, step, count = run.data, run.step, run.count
    start = codec.FRAME_HEADER
    if step - start < MIN_SIZE:
        return None
    for k, byte in enumerate(MARKER):
        if data[start + k::step] != bytes((byte,)) * count:
            return None
    column = bytearray(8 * count)  # the stamps, big-endian, back to back
    for k in range(8):
        column[k::8] = data[start + len(MARKER) + k::step]
    raw = bytes(column)
    stretches = []
    position = 0
    while position < count:  # a datagram holds a batch or the ends of a few: a stretch each, found in C
        field = raw[8 * position:8 * position + 8]
        last = raw.rfind(field)
        length = last // 8 - position + 1
        if last % 8 or length < 1 or raw[8 * position:last + 8] != field * length:
            break  # the stamp recurs apart: the rest frame by frame
        stretches.append((int.from_bytes(field, "big"), length, run.first + position))
        position += length
    seq = run.first + position
    stamps = array("Q", raw[8 * position:])
    if sys.byteorder == "little":
        stamps.byteswap()
    for value, same in groupby(stamps):
        length = sum(1 for _ in same)
        stretches.append((value, length, seq))
        seq += length
    return stretches
