"""Time bounds given on the command line, and the date/hour partitions they cover.

The journal partitions its Parquet files by UTC receive hour
(``date=YYYY-MM-DD/hour=HH``).  A filter on ``received_at`` alone makes Spark
open every file's footer; the equivalent filter on the partition columns lets
it skip whole folders before reading anything (``PartitionFilters`` in the
plan).  This module is pure: it turns text into instants and instants into
the partition bounds.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from fyrehose.errors import InputError

_NUMBER = re.compile(r"\A[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?\Z")
MICROSECOND = timedelta(microseconds=1)


class TimeFormatError(InputError):
    pass


def parse_time(text: str) -> datetime:
    """An aware UTC instant from ISO-8601 (no offset means UTC) or unix seconds."""
    text = text.strip()
    if _NUMBER.match(text):
        try:
            return datetime.fromtimestamp(float(text), UTC)
        except (OverflowError, OSError, ValueError):
            raise TimeFormatError(f"time {text!r} is out of range") from None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise TimeFormatError(f"time {text!r} is neither ISO-8601 (2024-05-01T13:00:00Z) nor unix seconds") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC)


def partition_key(moment: datetime) -> tuple[date, int]:
    """The (date, hour) partition holding rows received at ``moment``."""
    utc = moment.astimezone(UTC)
    return utc.date(), utc.hour


@dataclass(frozen=True)
class TimeRange:
    """``start <= received_at < end``; either bound may be open (None)."""

    start: datetime | None = None
    end: datetime | None = None

    def __post_init__(self) -> None:
        if self.start is not None and self.end is not None and self.end <= self.start:
            raise TimeFormatError(f"--to ({self.end.isoformat()}) must be after --from ({self.start.isoformat()})")

    def first_partition(self) -> tuple[date, int] | None:
        return None if self.start is None else partition_key(self.start)

    def last_partition(self) -> tuple[date, int] | None:
        """The last partition that can hold a row before the (exclusive) end."""
        return None if self.end is None else partition_key(self.end - MICROSECOND)


WINDOW_STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400)
MAX_WINDOWS = 400


def choose_window(span_seconds: float, max_windows: int = MAX_WINDOWS) -> int:
    """The shortest round window (seconds) that cuts ``span_seconds`` into at most ``max_windows`` pieces."""
    for step in WINDOW_STEPS:
        if span_seconds / step <= max_windows:
            return step
    days = int(span_seconds // (86400 * max_windows)) + 1
    return 86400 * days


def as_utc(moment: datetime) -> datetime:
    """An aware UTC datetime from one Spark collected: pyspark returns naive datetimes in the process's local time."""
    return moment.astimezone(UTC)
