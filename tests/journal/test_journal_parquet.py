"""Parquet output: the exact schema and Hive layout the pipeline reads, idempotent re-export, verify's checks."""
from __future__ import annotations

from datetime import UTC, datetime

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from fyrehose.journal.parquet import SCHEMA, export_records, list_files
from fyrehose.journal.store import JournalStore
from fyrehose.journal.verify import verify_directory
from fyrehose.protocol.tracker import Message
from fyrehose.subjects import envelope

START = int(datetime(2024, 5, 1, 13, 59, 58, tzinfo=UTC).timestamp()) * 10**6


class Clock:
    def __init__(self, now):
        self.now = now

    def __call__(self):
        return self.now


def payload(seq):
    if seq % 3 == 0:
        return b"raw %d" % seq
    return envelope.encode(envelope.Envelope(f"prices.eu.s{seq % 2}", b"data %d" % seq))


def journal_across_an_hour(directory):
    """Sequences 1..40, received one per 0.1 s from 13:59:58 UTC: 1..20 in hour 13, 21..40 in hour 14; sealed."""
    clock = Clock(START)
    store = JournalStore(directory, clock=clock)
    store.open()
    for seq in range(1, 41):
        store.write([Message(seq, payload(seq))])
        clock.now += 100_000
    (segment,) = [store.seal_active()]
    return store, segment


def test_export_writes_the_schema_and_hive_partitions_the_pipeline_reads(tmp_path):
    store, segment = journal_across_an_hour(tmp_path)
    files = export_records(store.records_of(segment), store.parquet_dir)
    store.close()
    root = tmp_path / "parquet"
    assert sorted(str(f.relative_to(root)) for f in files) == [
        "date=2024-05-01/hour=13/seg-0000000000000001.parquet",
        "date=2024-05-01/hour=14/seg-0000000000000021.parquet",
    ]
    assert list_files(root) == sorted(files)
    table = pq.read_table(files[0])
    assert table.schema.equals(SCHEMA)
    assert [str(field.type) for field in table.schema] == [
        "int64", "timestamp[us, tz=UTC]", "string", "binary", "int32"]
    assert [field.nullable for field in table.schema] == [False, False, True, True, True]
    rows = table.to_pylist()
    assert [r["seq"] for r in rows] == list(range(1, 21))
    assert rows[0]["received_at"] == datetime(2024, 5, 1, 13, 59, 58, tzinfo=UTC)
    assert rows[2]["subject"] is None and rows[2]["payload"] == b"raw 3"  # a raw payload has no subject
    assert rows[0]["subject"] == "prices.eu.s1" and rows[1]["subject"] == "prices.eu.s0"
    assert all(r["size"] == len(r["payload"]) for r in rows)
    # Hive-style partitions: a filter on them reads only the matching directory
    dataset = ds.dataset(root, format="parquet", partitioning="hive")
    later = dataset.to_table(filter=ds.field("hour") == 14)
    assert later.column("seq").to_pylist() == list(range(21, 41))
    (fragment,) = dataset.get_fragments(filter=ds.field("hour") == 14)
    assert fragment.path.endswith("date=2024-05-01/hour=14/seg-0000000000000021.parquet")


def test_exporting_again_replaces_the_files_without_duplicating_rows(tmp_path):
    store, segment = journal_across_an_hour(tmp_path)
    export_records(store.records_of(segment), store.parquet_dir)
    export_records(store.records_of(segment), store.parquet_dir)
    store.close()
    table = ds.dataset(tmp_path / "parquet", format="parquet", partitioning="hive").to_table()
    assert sorted(table.column("seq").to_pylist()) == list(range(1, 41))
    assert not [p for p in (tmp_path / "parquet").rglob("*") if p.name.startswith(".")]  # no temporary leftovers


def test_verify_checks_exported_segments_against_their_parquet_files(tmp_path):
    store, segment = journal_across_an_hour(tmp_path)
    files = export_records(store.records_of(segment), store.parquet_dir)
    store.mark_exported(segment)
    store.close()
    report = verify_directory(tmp_path)
    assert report.ok and report.parquet_files == 2
    files[1].unlink()
    report = verify_directory(tmp_path)
    assert not report.ok
    assert "Parquet files hold 20 rows, the segment 40 records" in report.problems[0]
    wrong = pa.Table.from_pylist([{"seq": 21, "payload": b"x"}])
    pq.write_table(wrong, files[1])
    report = verify_directory(tmp_path)
    assert any("schema differs" in p for p in report.problems)


def test_the_export_worker_process_exports_a_sealed_segment_and_reports_failures(tmp_path):
    import pytest

    from fyrehose.journal.export_worker import ExportWorker

    store = JournalStore(tmp_path / "j")
    store.open()
    store.write([Message(seq, b"row %d" % seq) for seq in range(1, 101)])
    sealed = store.seal_active()
    store.close()
    worker = ExportWorker()
    try:
        worker.export(str(sealed.path), sealed.summary.size, str(tmp_path / "j" / "parquet"))
        with pytest.raises(RuntimeError, match="No such file"):
            worker.export(str(tmp_path / "missing.log"), 10, str(tmp_path / "j" / "parquet"))
        worker.export(str(sealed.path), sealed.summary.size, str(tmp_path / "again"))  # it goes on after a failure
    finally:
        worker.close()
    rows = ds.dataset(tmp_path / "j" / "parquet", format="parquet", partitioning="hive").to_table()
    assert sorted(rows.column("seq").to_pylist()) == list(range(1, 101))
    assert ds.dataset(tmp_path / "again", format="parquet", partitioning="hive").count_rows() == 100
