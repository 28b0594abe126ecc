"""The gap index ``gaps.jsonl``: every range of sequences the journal knows it will never hold.

One JSON object per line, ``{"from_seq": int, "to_seq": int, "recorded_at":
"ISO-8601 UTC"}`` with inclusive ranges, so the data pipeline can tell a
permanent loss from a sequence it simply has not read yet.  A loss is never
papered over: the journal appends the line, fsynced, before it writes any
record past the gap.  :func:`parse_gaps` is pure; :class:`GapIndex` is the thin
file around it.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import orjson

from fyrehose.errors import InputError
from fyrehose.protocol.codec import MAX_SEQUENCE
from fyrehose.runtime.durable import fsync_directory

FILE_NAME = "gaps.jsonl"


class GapIndexError(InputError):
    pass


@dataclass(frozen=True, slots=True)
class Gap:
    from_seq: int
    to_seq: int
    recorded_at: str  # ISO-8601 with an explicit UTC offset

    @property
    def count(self) -> int:
        return self.to_seq - self.from_seq + 1


def utc_iso(time_us: int) -> str:
    """``2024-05-01T13:04:05.123456+00:00`` for a time in µs since the epoch."""
    return datetime.fromtimestamp(time_us / 1e6, UTC).isoformat(timespec="microseconds")


def encode_gap(gap: Gap) -> bytes:
    _check(gap.from_seq, gap.to_seq)
    return orjson.dumps({"from_seq": gap.from_seq, "to_seq": gap.to_seq, "recorded_at": gap.recorded_at}) + b"\n"


def parse_gaps(raw: bytes) -> tuple[list[Gap], int, str | None]:
    """The gaps of a file's content, the length of its intact part, and what is wrong after it.

    A last line without its newline is a write cut short (a torn tail): it is
    left out of the intact part.  A damaged line stops the parse there; the
    caller decides whether that is a torn tail (nothing follows) or damage.
    """
    gaps: list[Gap] = []
    position = 0
    while position < len(raw):
        end = raw.find(b"\n", position)
        if end < 0:
            return gaps, position, "incomplete last line"
        try:
            fields = orjson.loads(raw[position:end])
            gap = Gap(fields["from_seq"], fields["to_seq"], fields["recorded_at"])
            if type(gap.from_seq) is not int or type(gap.to_seq) is not int or type(gap.recorded_at) is not str:
                raise ValueError("wrong field types")
            _check(gap.from_seq, gap.to_seq)
            datetime.fromisoformat(gap.recorded_at)
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, GapIndexError) as exc:
            line = raw.count(b"\n", 0, position) + 1
            return gaps, position, f"line {line} is damaged ({exc})"
        gaps.append(gap)
        position = end + 1
    return gaps, position, None


def _check(from_seq: int, to_seq: int) -> None:
    if not 1 <= from_seq <= to_seq <= MAX_SEQUENCE:
        raise GapIndexError(f"bad gap range {from_seq}..{to_seq}")


class GapIndex:
    """The append-only ``gaps.jsonl`` of one journal directory."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / FILE_NAME
        self.gaps: list[Gap] = []
        self._fd: int | None = None

    def open(self) -> None:
        """Load the index, cutting off a last line cut short by a crash; a damaged whole line is an error."""
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            raw = b""
        gaps, intact, problem = parse_gaps(raw)
        if problem is not None and raw.find(b"\n", intact) != -1:
            raise GapIndexError(f"{self.path}: {problem}; repair or remove that line")
        created = not self.path.exists()
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        if intact < len(raw):
            os.ftruncate(self._fd, intact)
            os.fsync(self._fd)
        if created:
            fsync_directory(self.path.parent)
        self.gaps = gaps

    @property
    def last_seq(self) -> int:
        return max((gap.to_seq for gap in self.gaps), default=0)

    def append(self, gap: Gap) -> None:
        """Write one gap and fsync it: it must be durable before any record beyond it."""
        line = encode_gap(gap)
        assert self._fd is not None, "append before open"  # the store opens its index before writing anything
        os.write(self._fd, line)
        os.fsync(self._fd)
        self.gaps.append(gap)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
