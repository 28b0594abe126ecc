"""Which old segments the journal may delete: by age, by total size, or both.  Pure.

Only a prefix of the journal is ever removed (oldest first), so what remains is
one contiguous range and ``journal verify`` can still prove it has no
unrecorded hole.  A segment is never removed while it is still being written,
while it is the newest one (it carries the position to resume from), or before
its Parquet files are complete when Parquet output is on: the pipeline must
have had its copy first.
"""
from __future__ import annotations

import argparse
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from fyrehose.runtime.argtypes import duration

_DURATION_UNITS = {"s": 1, "min": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_SIZE_UNITS = {
    "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
}
_QUANTITY = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]+)\s*")


@dataclass(frozen=True)
class Retention:
    max_age: float | None = None  # seconds
    max_bytes: int | None = None


@dataclass(frozen=True)
class SegmentState:
    first_seq: int
    size: int
    newest: int  # latest receive time in the segment, µs since the epoch
    sealed: bool
    exported: bool


def _seconds(text: str) -> float | None:
    """Seconds when ``text`` is written as every duration option takes it (``15``, ``15s``, ``1m30s``, ``1h``)."""
    try:
        seconds = duration(text)
    except argparse.ArgumentTypeError:
        return None
    if not seconds > 0:
        raise ValueError(f"{text!r}: must be more than zero")
    if not math.isfinite(seconds):
        raise ValueError(f"{text!r}: must be a finite duration")
    return seconds


def parse_quantity(text: str) -> tuple[str, float]:
    """``("age", seconds)`` or ``("size", bytes)`` for texts like ``7d``, ``1m30s``, ``90min``, ``50GB``, ``512MiB``.

    Durations are written as every duration option takes them (plain seconds
    ``15``, or ``15s``, ``1m30s``, ``12h``, ``7d``, ``500ms``: see
    :func:`fyrehose.runtime.argtypes.duration`), or with the units min and w.  Sizes
    take B, KB, MB, GB, TB (powers of 1000) or KiB, MiB, GiB, TiB (powers of
    1024), in any letter case.  A bare "m" is minutes (``5m``), as in every
    duration option; megabytes are MB or MiB.
    """
    match = _QUANTITY.fullmatch(text)
    seconds = _seconds(text)
    if seconds is not None:
        return "age", seconds
    if match is None:
        raise ValueError(f"{text!r}: expected a duration (like 15, 1m30s, 12h, 7d) or a size (like 50GB)")
    number, unit = float(match.group(1)), match.group(2).lower()
    if number <= 0:
        raise ValueError(f"{text!r}: must be more than zero")
    if unit in _DURATION_UNITS:
        return "age", number * _DURATION_UNITS[unit]
    if unit in _SIZE_UNITS:
        return "size", number * _SIZE_UNITS[unit]
    raise ValueError(f"{text!r}: unknown unit {match.group(2)!r} "
                     "(durations: s min h d w, or like 1m30s; sizes: B KB MB GB TB KiB MiB GiB TiB)")


def parse_size(text: str) -> int:
    kind, value = parse_quantity(text)
    if kind != "size":
        raise ValueError(f"{text!r} is a duration; a size is wanted here (like 64MiB)")
    return int(value)


def parse_duration(text: str) -> float:
    """Seconds, as every duration option takes them (``5m`` is 5 minutes here), or in min and w (``10min``, ``2w``)."""
    seconds = _seconds(text)
    if seconds is not None:
        return seconds
    kind, value = parse_quantity(text)
    if kind != "age":
        raise ValueError(f"{text!r} is a size; a duration is wanted here (like 10min)")
    return value


def parse_retention(values: Sequence[str]) -> Retention:
    """``["7d", "50GB"]``: keep 7 days and at most 50 GB; a later value of one kind replaces an earlier one."""
    max_age = max_bytes = None
    for value in values:
        kind, amount = parse_quantity(value)
        if kind == "age":
            max_age = amount
        else:
            max_bytes = int(amount)
    return Retention(max_age, max_bytes)


def expired_segments(segments: Sequence[SegmentState], retention: Retention, now_us: int,
                     require_export: bool) -> list[int]:
    """The first sequences of the segments to delete, oldest first; ``segments`` ascend by sequence."""
    total = sum(segment.size for segment in segments)
    cutoff = None if retention.max_age is None else now_us - int(retention.max_age * 1e6)
    expired = []
    for segment in segments[:-1]:  # the newest segment always stays
        if not segment.sealed or (require_export and not segment.exported):
            break
        too_old = cutoff is not None and segment.newest < cutoff
        too_big = retention.max_bytes is not None and total > retention.max_bytes
        if not (too_old or too_big):
            break
        expired.append(segment.first_seq)
        total -= segment.size
    return expired
