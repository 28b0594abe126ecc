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

from fyrehose.journal.segment import FILE_HEADER, FORMAT_BLOCKS, FORMAT_RECORDS, SegmentError, block_size, record_size

INDEX_STRIDE = 64 << 10  # one index entry per 64 KiB of records


@dataclass
class SegmentSummary:
    first_seq: int
    last_seq: int
    records: int
    size: int  # bytes of intact records (format 2: the file header included)
    oldest: int  # earliest receive time, µs since the epoch
    newest: int  # latest receive time
    index: list[tuple[int, int]] = field(default_factory=list)  # (seq, offset), ascending, starts at first_seq
    exported: bool = False  # its Parquet files are complete
    format: int = FORMAT_RECORDS  # segment.FORMAT_RECORDS or FORMAT_BLOCKS

    def offset_before(self, seq: int) -> int:
        """The offset of an indexed record at or before ``seq`` (0 when ``seq`` precedes them all)."""
        position = bisect.bisect_right(self.index, seq, key=lambda entry: entry[0])
        return self.index[position - 1][1] if position else 0


class SummaryBuilder:
    """Accumulates a summary as records (format 1) or blocks (format 2) are appended, or scanned, in order.

    In format 2 every index entry is the offset of a block, so a read that
    starts there begins at a datagram boundary.
    """

    def __init__(self, stride: int = INDEX_STRIDE, format: int = FORMAT_RECORDS) -> None:
        self.stride = stride
        self.format = format
        self.summary: SegmentSummary | None = None
        self._start = _start(format)
        self._next_index_at = self._start

    @property
    def size(self) -> int:
        return self.summary.size if self.summary else self._start

    def add_block(self, first: int, count: int, received_at: int, frames_length: int) -> None:
        """One more format-2 block of ``count`` messages, appended at the current size."""
        summary = self.summary
        if summary is None:
            summary = self.summary = SegmentSummary(first, first, 0, self._start, received_at, received_at,
                                                    format=self.format)
        elif first <= summary.last_seq:
            raise SegmentError(f"sequence {first} after {summary.last_seq}: blocks must ascend")
        if summary.size >= self._next_index_at:
            summary.index.append((first, summary.size))
            self._next_index_at = summary.size + self.stride
        summary.last_seq = first + count - 1
        summary.records += count
        summary.size += block_size(frames_length)
        if received_at < summary.oldest:
            summary.oldest = received_at
        if received_at > summary.newest:
            summary.newest = received_at

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
        "format": summary.format,
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
            format=_int(fields.get("format", FORMAT_RECORDS)),
        )
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise SegmentError(f"damaged segment summary: {exc}") from None
    ordered = all(a[0] < b[0] and a[1] < b[1] for a, b in zip(summary.index, summary.index[1:]))
    if (summary.first_seq < 1 or summary.last_seq < summary.first_seq or summary.records < 1
            or summary.oldest > summary.newest or summary.format not in (FORMAT_RECORDS, FORMAT_BLOCKS)
            or not summary.index or summary.index[0] != (summary.first_seq, _start(summary.format))
            or not ordered or summary.index[-1][0] > summary.last_seq or summary.index[-1][1] >= summary.size):
        raise SegmentError("inconsistent segment summary")
    return summary


def _int(value: object) -> int:
    if type(value) is not int:
        raise ValueError(f"{value!r} is not an integer")
    return value


def _start(format: int) -> int:
    """Where a segment's first record or block begins."""
    return len(FILE_HEADER) if format == FORMAT_BLOCKS else 0
