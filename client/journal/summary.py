"""What the journal knows about a segment without reading it: range, size, times, a sparse offset index.

A sealed segment's summary is kept beside it (``seg-N.idx``, JSON), so that
start-up, retention and ``inspect`` never rescan old segments and a FORWARD for
an old sequence seeks close to it instead of reading from the start.  The
active segment's summary is built in memory as records are appended.
Pure: bytes and records in, summaries out.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass, field

import orjson

from fyrehose.journal.segment import SegmentError, record_size

INDEX_STRIDE = 64 << 10  # one index entry per 64 KiB of records


@dataclass
class SegmentSummary:
    first_seq: int
    last_seq: int
    records: int
    size: int  # bytes of intact records
    oldest: int  # earliest receive time, µs since the epoch
    newest: int  # latest receive time
    index: list[tuple[int, int]] = field(default_factory=list)  # (seq, offset), ascending, starts at (first_seq, 0)
    exported: bool = False  # its Parquet files are complete

    def offset_before(self, seq: int) -> int:
        """The offset of an indexed record at or before ``seq`` (0 when ``seq`` precedes them all)."""
        position = bisect.bisect_right(self.index, seq, key=lambda entry: entry[0])
        return self.index[position - 1][1] if position else 0


class SummaryBuilder:
    """Accumulates a summary as records are appended (or scanned) in order."""

    def __init__(self, stride: int = INDEX_STRIDE) -> None:
        self.stride = stride
        self.summary: SegmentSummary | None = None
        self._next_index_at = 0

    @property
    def size(self) -> int:
        return self.summary.size if self.summary else 0

    def add(self, seq: int, received_at: int, length: int) -> None:
        """One more record of ``length`` payload bytes, appended at the current size."""
        summary = self.summary
        if summary is None:
            summary = self.summary = SegmentSummary(seq, seq, 0, 0, received_at, received_at)
        elif seq <= summary.last_seq:
            raise SegmentError(f"sequence {seq} after {summary.last_seq}: records must ascend")
        if summary.size >= self._next_index_at:
            summary.index.append((seq, summary.size))
            self._next_index_at = summary.size + self.stride
        summary.last_seq = seq
        summary.records += 1
        summary.size += record_size(length)
        if received_at < summary.oldest:
            summary.oldest = received_at
        if received_at > summary.newest:
            summary.newest = received_at


def encode_summary(summary: SegmentSummary) -> bytes:
    return orjson.dumps({
        "first_seq": summary.first_seq,
        "last_seq": summary.last_seq,
        "records": summary.records,
        "size": summary.size,
        "oldest": summary.oldest,
        "newest": summary.newest,
        "index": summary.index,
        "exported": summary.exported,
    })


def decode_summary(raw: bytes) -> SegmentSummary:
    """Parse a summary file; any damage raises SegmentError (the caller then rescans the segment)."""
    try:
        fields = orjson.loads(raw)
        summary = SegmentSummary(
            first_seq=_int(fields["first_seq"]),
            last_seq=_int(fields["last_seq"]),
            records=_int(fields["records"]),
            size=_int(fields["size"]),
            oldest=_int(fields["oldest"]),
            newest=_int(fields["newest"]),
            index=[(_int(seq), _int(offset)) for seq, offset in fields["index"]],
            exported=fields["exported"] is True,
        )
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise SegmentError(f"damaged segment summary: {exc}") from None
    ordered = all(a[0] < b[0] and a[1] < b[1] for a, b in zip(summary.index, summary.index[1:]))
    if (summary.first_seq < 1 or summary.last_seq < summary.first_seq or summary.records < 1
            or summary.oldest > summary.newest or not summary.index or summary.index[0] != (summary.first_seq, 0)
            or not ordered or summary.index[-1][0] > summary.last_seq or summary.index[-1][1] >= summary.size):
        raise SegmentError("inconsistent segment summary")
    return summary


def _int(value: object) -> int:
    if type(value) is not int:
        raise ValueError(f"{value!r} is not an integer")
    return value
