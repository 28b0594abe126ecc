"""Sealed segments as Parquet for the data pipeline, partitioned Hive-style by UTC receive hour.

Layout (the interface the pipeline reads; see docs/journal.md)::

    DIR/parquet/date=YYYY-MM-DD/hour=HH/seg-<first_seq:016d>.parquet

A segment's rows go to the partition of each row's receive time, so a
segment that spans an hour boundary (or holds backfilled messages received
later) gives one file per partition, each named by the first sequence it
holds.  Names are deterministic, so exporting a segment again (after a crash
mid-export, or ``journal export --force``) replaces its files instead of
duplicating rows.  Files are written under a hidden temporary name (Spark and
Hive skip names starting with a dot), fsynced and renamed into place: a reader
never sees a partial file.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from fyrehose.journal.segment import Record
from fyrehose.runtime.durable import fsync_directory, move_into_place
from fyrehose.subjects.envelope import peek_subject

SCHEMA = pa.schema([
    pa.field("seq", pa.int64(), nullable=False),
    pa.field("received_at", pa.timestamp("us", tz="UTC"), nullable=False),
    pa.field("subject", pa.string()),
    pa.field("payload", pa.binary()),
    pa.field("size", pa.int32()),
])
HOUR_US = 3600 * 10**6
ROWS_PER_GROUP = 65536
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def partition_of(received_at: int) -> str:
    """``date=YYYY-MM-DD/hour=HH`` of a receive time in µs since the epoch (UTC)."""
    moment = _EPOCH + timedelta(microseconds=received_at)
    return f"date={moment:%Y-%m-%d}/hour={moment:%H}"


def file_name(first_seq: int) -> str:
    return f"seg-{first_seq:016d}.parquet"


@dataclass
class _PartitionFile:
    """One output file being written: rows collect in columns and go out a row group at a time."""

    final: Path
    tmp: Path
    writer: pq.ParquetWriter
    rows: int = 0
    columns: tuple[list, list, list, list, list] = field(default_factory=lambda: ([], [], [], [], []))

    def add(self, record: Record) -> None:
        seqs, times, subjects, payloads, sizes = self.columns
        seqs.append(record.seq)
        times.append(record.received_at)
        subjects.append(peek_subject(record.data))
        payloads.append(record.data)
        sizes.append(len(record.data))
        if len(seqs) >= ROWS_PER_GROUP:
            self.flush()

    def flush(self) -> None:
        seqs, times, subjects, payloads, sizes = self.columns
        if not seqs:
            return
        arrays = [
            pa.array(seqs, pa.int64()),
            pa.array(times, pa.timestamp("us", tz="UTC")),
            pa.array(subjects, pa.string()),
            pa.array(payloads, pa.binary()),
            pa.array(sizes, pa.int32()),
        ]
        self.writer.write_table(pa.Table.from_arrays(arrays, schema=SCHEMA))
        self.rows += len(seqs)
        for column in self.columns:
            column.clear()


def export_records(records: Iterable[Record], root: Path) -> list[Path]:
    """Write one segment's records (ascending) as Parquet under ``root``; the files written."""
    files: dict[int, _PartitionFile] = {}
    try:
        for record in records:
            hour = record.received_at // HOUR_US
            out = files.get(hour)
            if out is None:
                directory = root / partition_of(record.received_at)
                directory.mkdir(parents=True, exist_ok=True)
                name = file_name(record.seq)
                tmp = directory / f".{name}.tmp"
                out = files[hour] = _PartitionFile(directory / name, tmp, pq.ParquetWriter(tmp, SCHEMA))
            out.add(record)
        for out in files.values():
            out.flush()
            out.writer.close()
            move_into_place(out.tmp, out.final)
    except BaseException:
        for out in files.values():
            out.writer.close()
            out.tmp.unlink(missing_ok=True)
        raise
    for directory in sorted({out.final.parent for out in files.values()}):  # the partition directories made above
        fsync_directory(directory.parent)
    if files:
        fsync_directory(root)
    return [out.final for out in files.values()]


@dataclass(frozen=True)
class ParquetFileInfo:
    path: Path
    rows: int
    min_seq: int | None
    max_seq: int | None
    schema_matches: bool


def list_files(root: Path) -> list[Path]:
    """Every exported Parquet file under ``root`` (hidden temporary files excluded)."""
    if not root.exists():
        return []
    return sorted(path for path in root.glob("date=*/hour=*/seg-*.parquet"))


def describe(path: Path) -> ParquetFileInfo:
    """Row count, sequence range (from the column statistics) and schema check, without reading the data."""
    parquet = pq.ParquetFile(path)
    metadata = parquet.metadata
    low = high = None
    for group in range(metadata.num_row_groups):
        stats = metadata.row_group(group).column(0).statistics
        if stats is not None and stats.has_min_max:
            low = stats.min if low is None else min(low, stats.min)
            high = stats.max if high is None else max(high, stats.max)
    return ParquetFileInfo(path, metadata.num_rows, low, high, parquet.schema_arrow.equals(SCHEMA))



def export_segment(path: str, size: int, root: str) -> None:
    """Export the sealed segment at ``path`` (its first ``size`` bytes): the entry point of the export worker
    process, which keeps this per-message work away from the journal's recording path."""
    from fyrehose.journal.reader import FileScan

    export_records((record for _, record in FileScan(Path(path), 0, size)), Path(root))
