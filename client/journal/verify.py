"""``journal verify``: prove a journal directory whole, or say exactly what is wrong with it.

Checks every record's checksum and order, that each segment starts with the
sequence in its name and matches its summary, that every sequence between the
first and the last record is either held or listed in gaps.jsonl (and that
gaps.jsonl claims nothing the journal holds), and that each exported segment's
Parquet files hold exactly its records.  A torn tail at the end of the
unsealed last segment is normal after a crash (the journal cuts it off when it
restarts), so it is a note, not a problem.  The interval arithmetic is pure.
"""
from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from fyrehose.journal.gapindex import FILE_NAME as GAPS_FILE
from fyrehose.journal.gapindex import parse_gaps
from fyrehose.journal.reader import FileScan, list_segments
from fyrehose.journal.store import PARQUET_DIR

Range = tuple[int, int]  # inclusive


def merge(ranges: Iterable[Range]) -> list[Range]:
    """Sorted, disjoint, non-adjacent ranges covering the same sequences."""
    merged: list[Range] = []
    for low, high in sorted(ranges):
        if merged and low <= merged[-1][1] + 1:
            if high > merged[-1][1]:
                merged[-1] = (merged[-1][0], high)
        else:
            merged.append((low, high))
    return merged


def subtract(ranges: Iterable[Range], minus: Iterable[Range]) -> list[Range]:
    """The sequences of ``ranges`` that are not in ``minus``, as merged ranges."""
    result: list[Range] = []
    cut = merge(minus)
    index = 0
    for low, high in merge(ranges):
        while index < len(cut) and cut[index][1] < low:
            index += 1
        probe = index
        while low <= high:
            if probe >= len(cut) or cut[probe][0] > high:
                result.append((low, high))
                break
            if cut[probe][0] > low:
                result.append((low, cut[probe][0] - 1))
            low = max(low, cut[probe][1] + 1)
            probe += 1
    return result


class Continuity:
    """Feeds ascending sequences and keeps the holes between them (pure)."""

    def __init__(self) -> None:
        self.first: int | None = None
        self.last: int | None = None
        self.holes: list[Range] = []

    def add(self, seq: int) -> bool:
        """False (and nothing recorded) when ``seq`` does not ascend."""
        if self.last is not None:
            if seq <= self.last:
                return False
            if seq > self.last + 1:
                self.holes.append((self.last + 1, seq - 1))
        else:
            self.first = seq
        self.last = seq
        return True


@dataclass
class VerifyReport:
    directory: Path
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    segments: int = 0
    sealed: int = 0
    records: int = 0
    size: int = 0
    first_seq: int | None = None
    last_seq: int | None = None
    gap_ranges: int = 0
    lost: int = 0
    parquet_files: int = 0

    @property
    def ok(self) -> bool:
        return not self.problems

    def lines(self) -> list[str]:
        span = "none" if self.first_seq is None else f"{self.first_seq}..{self.last_seq}"
        out = [
            f"journal {self.directory}",
            f"segments: {self.segments} ({self.sealed} sealed), {self.size} bytes, "
            f"{self.records} records, sequences {span}",
            f"gaps: {self.gap_ranges} ranges, {self.lost} sequences recorded lost",
            f"parquet: {self.parquet_files} files checked",
        ]
        out += [f"note: {note}" for note in self.notes]
        out += [f"problem: {problem}" for problem in self.problems]
        out.append("OK" if self.ok else f"FAILED: {len(self.problems)} problem(s)")
        return out


def total_bytes(directory: Path) -> int:
    segments, _ = list_segments(directory)
    return sum(segment.current_size() for segment in segments)


def verify_directory(directory: Path, on_read: Callable[[int], None] | None = None) -> VerifyReport:
    report = VerifyReport(directory)
    if not directory.is_dir():
        raise FileNotFoundError(f"{directory} is not a directory")
    segments, orphans = list_segments(directory)
    for path in orphans:
        report.notes.append(f"{path.name} has no segment (removed when the journal next starts)")
    continuity = Continuity()
    exported: list[tuple[int, int, int]] = []  # (first, last, records) of exported segments
    for index, segment in enumerate(segments):
        scan = FileScan(segment.path, on_read=on_read)
        name = segment.path.name
        try:
            size = segment.path.stat().st_size
            for offset, record in scan:
                if not continuity.add(record.seq):
                    report.problems.append(f"{name}: sequence {record.seq} at offset {offset} does not ascend")
                    continue
        except FileNotFoundError:
            if continuity.last is not None:
                raise  # retention removes the oldest segments only: this is not retention
            report.notes.append(f"{name} was removed while verifying (retention of a running journal)")
            continue
        report.segments += 1
        summary = scan.builder.summary
        report.size += size
        if summary is not None:
            report.records += summary.records
            if summary.first_seq != segment.first_seq:
                report.problems.append(f"{name} starts with sequence {summary.first_seq}")
        if scan.stop is not None:
            if index == len(segments) - 1 and segment.summary is None:
                torn = size - scan.end
                report.notes.append(f"{name}: torn tail of {torn} bytes at offset {scan.end} ({scan.stop}); "
                                    "the journal cuts it off when it restarts")
            else:
                report.problems.append(f"{name}: damaged record at offset {scan.end} ({scan.stop})")
        if segment.summary is not None:
            report.sealed += 1
            recorded = segment.summary
            if summary is None or (recorded.first_seq, recorded.last_seq, recorded.records, recorded.size,
                                   recorded.oldest, recorded.newest, recorded.index) != (
                    summary.first_seq, summary.last_seq, summary.records, summary.size,
                    summary.oldest, summary.newest, summary.index) or recorded.format != summary.format:
                report.problems.append(f"{name}: its summary {segment.summary_path.name} does not match its records")
            elif recorded.exported:
                exported.append((recorded.first_seq, recorded.last_seq, recorded.records))
        elif index != len(segments) - 1:
            report.notes.append(f"{name} is not sealed although a later segment exists "
                                "(sealed when the journal next starts)")
    report.first_seq, report.last_seq = continuity.first, continuity.last

    gaps_path = directory / GAPS_FILE
    raw = gaps_path.read_bytes() if gaps_path.exists() else b""
    gaps, intact, damage = parse_gaps(raw)
    if damage is not None:
        if raw.find(b"\n", intact) == -1:
            report.notes.append(f"{GAPS_FILE}: {damage}, a torn write; the journal cuts it off when it restarts")
        else:
            report.problems.append(f"{GAPS_FILE}: {damage}")
    report.gap_ranges = len(gaps)
    report.lost = sum(gap.count for gap in gaps)
    gap_ranges = [(gap.from_seq, gap.to_seq) for gap in gaps]
    for low, high in subtract(continuity.holes, gap_ranges):
        report.problems.append(f"sequences {low}..{high} are neither in a segment nor in {GAPS_FILE}")
    first, last = continuity.first, continuity.last
    if first is not None and last is not None:  # both set by the first sequence added
        claimed = [(max(a, first), min(b, last)) for a, b in gap_ranges if b >= first and a <= last]
        for low, high in subtract(claimed, continuity.holes):
            report.problems.append(f"{GAPS_FILE} records {low}..{high} as lost, but the journal holds them")
    _verify_parquet(directory / PARQUET_DIR, exported, report)
    return report


def _verify_parquet(root: Path, exported: list[tuple[int, int, int]], report: VerifyReport) -> None:
    if not exported:
        return
    if importlib.util.find_spec("pyarrow") is None:
        report.notes.append("Parquet files not checked: pyarrow is not installed (pip install 'fyrehose[journal]')")
        return
    from fyrehose.journal.parquet import describe, list_files

    infos = [describe(path) for path in list_files(root)]
    report.parquet_files = len(infos)
    for first, last, records in exported:
        mine = [info for info in infos if first <= int(info.path.stem[4:]) <= last]
        rows = sum(info.rows for info in mine)
        label = f"segment {first}..{last}"
        if rows != records:
            report.problems.append(f"{label}: its Parquet files hold {rows} rows, the segment {records} records")
        for info in mine:
            if not info.schema_matches:
                report.problems.append(f"{info.path}: schema differs from the journal's")
            if info.min_seq is None or info.max_seq is None or info.min_seq < first or info.max_seq > last:
                report.problems.append(f"{info.path}: sequences outside {label}")
