"""``journal inspect``: what a journal directory holds, read without locking it (a running journal may own it).

Sealed segments are described from their summaries; only the unsealed last
segment is scanned.  ``--records`` prints messages the way ``fyrehose sub``
does, with their receive time and subject.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TextIO

from fyrehose.journal.gapindex import FILE_NAME as GAPS_FILE
from fyrehose.journal.gapindex import parse_gaps, utc_iso
from fyrehose.journal.reader import FileScan, SegmentFile, list_segments, read_range, scan_segment
from fyrehose.journal.segment import Record
from fyrehose.journal.summary import SegmentSummary
from fyrehose.subjects.envelope import peek_subject

MAX_GAP_LINES = 20


def _summaries(segments: list[SegmentFile], on_read: Callable[[int], None] | None) -> list[tuple[SegmentFile, SegmentSummary | None]]:
    out = []
    for segment in segments:
        summary = segment.summary
        if summary is None:
            summary = scan_segment(segment.path, on_read)[0].summary
        out.append((segment, summary))
    return out


def unsealed_bytes(directory: Path) -> int:
    segments, _ = list_segments(directory)
    return sum(segment.current_size() for segment in segments if segment.summary is None)


def describe_directory(directory: Path, out: TextIO, on_read: Callable[[int], None] | None = None) -> None:
    if not directory.is_dir():
        raise FileNotFoundError(f"{directory} is not a directory")
    segments, _ = list_segments(directory)
    rows = _summaries(segments, on_read)
    out.write(f"journal {directory}\n")
    out.write(f"{'segment':<26} {'first':>12} {'last':>12} {'records':>10} {'bytes':>12}  "
              f"{'received from (UTC)':<32} {'received until (UTC)':<32} state\n")
    total_records = total_size = 0
    for segment, summary in rows:
        state = "sealed" if segment.summary else "active"
        if segment.summary and segment.summary.exported:
            state += ", exported"
        if summary is None:
            out.write(f"{segment.path.name:<26} {'(no intact records)':>12}\n")
            continue
        total_records += summary.records
        total_size += summary.size
        out.write(f"{segment.path.name:<26} {summary.first_seq:>12} {summary.last_seq:>12} {summary.records:>10} "
                  f"{summary.size:>12}  {utc_iso(summary.oldest):<32} {utc_iso(summary.newest):<32} {state}\n")
    gaps_path = directory / GAPS_FILE
    gaps, _, damage = parse_gaps(gaps_path.read_bytes() if gaps_path.exists() else b"")
    out.write(f"total: {len(rows)} segments, {total_records} records, {total_size} bytes\n")
    out.write(f"gaps: {len(gaps)} ranges, {sum(g.count for g in gaps)} sequences recorded lost\n")
    for gap in gaps[:MAX_GAP_LINES]:
        out.write(f"  lost {gap.from_seq}..{gap.to_seq} (recorded {gap.recorded_at})\n")
    if len(gaps) > MAX_GAP_LINES:
        out.write(f"  ... and {len(gaps) - MAX_GAP_LINES} more\n")
    if damage:
        out.write(f"  {GAPS_FILE}: {damage}\n")
    known = [summary for _, summary in rows if summary is not None]
    last = max([s.last_seq for s in known[-1:]] + [g.to_seq for g in gaps] + [0])
    out.write(f"resumes at: {last + 1 if last else 'the live stream (empty journal)'}\n")


def records_in(directory: Path, from_seq: int, to_seq: int) -> Iterator[Record]:
    """The records of ``from_seq..to_seq`` in a journal directory, ascending."""
    segments, _ = list_segments(directory)
    for position, segment in enumerate(segments):
        next_first = segments[position + 1].first_seq if position + 1 < len(segments) else None
        if (next_first is not None and next_first <= from_seq) or segment.first_seq > to_seq:
            continue
        if segment.summary is not None:
            yield from read_range(segment.path, from_seq, to_seq, segment.summary.offset_before(from_seq),
                                  segment.summary.size)
        else:
            for _, record in FileScan(segment.path):
                if record.seq > to_seq:
                    break
                if record.seq >= from_seq:
                    yield record


def print_records(directory: Path, from_seq: int, to_seq: int, out: TextIO) -> int:
    """Print ``SEQ RECEIVED_AT SUBJECT DATA`` (tab-separated) per record; how many were printed."""
    count = 0
    for record in records_in(directory, from_seq, to_seq):
        subject = peek_subject(record.data) or "-"
        text = record.data.decode("utf-8", "backslashreplace")
        out.write(f"{record.seq}\t{utc_iso(record.received_at)}\t{subject}\t{text}\n")
        count += 1
    return count
