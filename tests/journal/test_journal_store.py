"""The journal directory on real files: ordered writes, gaps, FORWARD reads, crash recovery, retention."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fyrehose.journal.gapindex import FILE_NAME as GAPS_FILE
from fyrehose.journal.gapindex import parse_gaps
from fyrehose.journal.retention import Retention
from fyrehose.journal.segment import block_size, encode_block, encode_record, log_name, summary_name
from fyrehose.journal.store import JournalStore, StoreError
from fyrehose.journal.verify import verify_directory
from fyrehose.protocol.codec import encode_deliver
from fyrehose.protocol.tracker import Lost, Message

HOUR_US = 3600 * 10**6


class Clock:
    """Receive times the test controls (µs since the epoch)."""

    def __init__(self, now: int = 1_700_000_000 * 10**6) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def messages(first, last, prefix=b"m"):
    return [Message(seq, prefix + b"%d" % seq) for seq in range(first, last + 1)]


def opened(directory, **options):
    store = JournalStore(directory, **options)
    return store, store.open()


def segment_files(directory):
    return sorted(p.name for p in (directory / "segments").iterdir())


def test_messages_are_written_in_order_and_read_back_across_segments(tmp_path):
    store, start = opened(tmp_path, segment_bytes=250)
    assert start is None
    store.write(messages(10, 100))
    assert len(store.sealed_segments()) > 3
    assert list(store.held(1, 200)) == [(s, b"m%d" % s) for s in range(10, 101)]
    assert list(store.held(37, 41)) == [(s, b"m%d" % s) for s in range(37, 42)]
    assert list(store.held(101, 300)) == []
    store.close()
    report = verify_directory(tmp_path)
    assert report.ok, report.problems
    assert (report.first_seq, report.last_seq, report.records) == (10, 100, 91)


def test_a_lost_range_is_recorded_after_the_blocks_before_it(tmp_path):
    clock = Clock()
    store, _ = opened(tmp_path, clock=clock)
    store.write(messages(1, 3))
    clock.now += 5
    gaps = store.write([*messages(4, 5), Lost(6, 8, "not recovered"), *messages(9, 10)])
    assert [(g.from_seq, g.to_seq) for g in gaps] == [(6, 8)]
    assert list(store.held(1, 10)) == [(s, b"m%d" % s) for s in (1, 2, 3, 4, 5, 9, 10)]
    store.close()
    recorded, _, problem = parse_gaps((tmp_path / GAPS_FILE).read_bytes())
    assert problem is None and [(g.from_seq, g.to_seq) for g in recorded] == [(6, 8)]
    assert verify_directory(tmp_path).ok
    _, start = opened(tmp_path)
    assert start == 11


def test_a_lost_tail_moves_the_resume_point_past_it(tmp_path):
    store, _ = opened(tmp_path)
    store.write(messages(1, 3) + [Lost(4, 9, "not recovered")])
    store.close()
    store, start = opened(tmp_path)
    assert start == 10
    store.close()


def test_events_out_of_order_are_refused(tmp_path):
    store, _ = opened(tmp_path)
    store.write(messages(1, 3))
    with pytest.raises(RuntimeError, match="5 where 4 was due"):
        store.write(messages(5, 5))
    store.close()


def test_a_second_journal_on_the_same_directory_is_refused(tmp_path):
    store, _ = opened(tmp_path)
    with pytest.raises(StoreError, match="in use"):
        opened(tmp_path)
    store.close()


def test_a_torn_record_is_cut_off_and_the_journal_resumes_at_it(tmp_path):
    store, _ = opened(tmp_path)
    store.write(messages(1, 49))
    store.write(messages(50, 50))  # a block of its own
    store.close()
    (log,) = (tmp_path / "segments").glob("*.log")
    size = log.stat().st_size
    with open(log, "r+b") as file:  # the last block lost its final bytes
        file.truncate(size - 3)
    store, start = opened(tmp_path)
    assert start == 50
    assert store.stats["truncated bytes"] == block_size(len(encode_deliver(50, b"m50"))) - 3
    store.write(messages(50, 60, prefix=b"again "))
    assert [s for s, _ in store.held(1, 100)] == list(range(1, 61))
    store.close()
    assert verify_directory(tmp_path).ok


def test_garbage_after_the_last_record_is_cut_off(tmp_path):
    store, _ = opened(tmp_path)
    store.write(messages(1, 5))
    store.close()
    (log,) = (tmp_path / "segments").glob("*.log")
    intact = log.stat().st_size
    with open(log, "ab") as file:
        file.write(encode_block(6, 1, 0, encode_deliver(6, b"half"))[:-1] + os.urandom(100))
    report = verify_directory(tmp_path)
    assert report.ok and any("torn tail" in note for note in report.notes)
    store, start = opened(tmp_path)
    assert start == 6 and log.stat().st_size == intact
    store.close()


def test_a_torn_gap_line_is_cut_off(tmp_path):
    store, _ = opened(tmp_path)
    store.write(messages(1, 2) + [Lost(3, 4, "not recovered")])
    store.close()
    with open(tmp_path / GAPS_FILE, "ab") as file:
        file.write(b'{"from_seq": 5, "to_')
    store, start = opened(tmp_path)
    assert start == 5
    store.close()
    assert (tmp_path / GAPS_FILE).read_bytes().endswith(b"}\n")


def test_a_damaged_gap_line_with_lines_after_it_stops_the_journal(tmp_path):
    store, _ = opened(tmp_path)
    store.write(messages(1, 2) + [Lost(3, 4, "not recovered"), *messages(5, 5), Lost(6, 7, "not recovered")])
    store.close()
    gaps = tmp_path / GAPS_FILE
    gaps.write_bytes(b"garbage\n" + gaps.read_bytes())
    with pytest.raises(ValueError, match="line 1 is damaged"):
        opened(tmp_path)
    assert not verify_directory(tmp_path).ok


def test_crash_leftovers_are_cleaned_and_an_unsealed_middle_segment_is_sealed(tmp_path):
    store, _ = opened(tmp_path, segment_bytes=300)
    store.write(messages(1, 40))
    store.close()
    segments = tmp_path / "segments"
    first, second = sorted(segments.glob("*.log"))[:2]
    (segments / summary_name(int(second.stem[4:]))).unlink()  # a crash between sealing steps
    (segments / (summary_name(1) + ".tmp")).write_bytes(b"half a summary")
    (segments / summary_name(999)).write_bytes(b"{}")  # its segment is gone
    (segments / log_name(41)).write_bytes(b"")  # created, then killed before the first write
    store, start = opened(tmp_path)
    assert start == 41
    names = segment_files(tmp_path)
    assert summary_name(int(second.stem[4:])) in names
    assert not any(n.endswith(".tmp") for n in names) and summary_name(999) not in names and log_name(41) not in names
    assert [s for s, _ in store.held(1, 40)] == list(range(1, 41))
    store.close()
    assert verify_directory(tmp_path).ok


def test_overlapping_segments_are_refused(tmp_path):
    store, _ = opened(tmp_path)
    store.write(messages(1, 10))
    store.close()
    (tmp_path / "segments" / log_name(5)).write_bytes(encode_record(5, 0, b"x"))
    with pytest.raises(StoreError, match="overlap"):
        opened(tmp_path)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(1, 30), min_size=1, max_size=8), st.data())
def test_after_a_cut_anywhere_the_journal_resumes_with_no_duplicate_and_no_hole(batches, data):
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        store, _ = opened(directory, segment_bytes=700)
        seq = 1
        for count in batches:
            store.write(messages(seq, seq + count - 1))
            seq += count
        store.close()
        logs = sorted((directory / "segments").glob("*.log"))
        last = logs[-1]
        cut = data.draw(st.integers(0, last.stat().st_size))
        with open(last, "r+b") as file:
            file.truncate(cut)
        store, start = opened(directory, segment_bytes=700)
        kept = [s for s, _ in store.held(1, seq)]
        assert kept == list(range(1, len(kept) + 1))  # a prefix: nothing duplicated, no hole
        assert start == (len(kept) + 1 if kept else None)  # None: an empty journal starts afresh
        store.write(messages(start or 1, seq + 5))
        assert [s for s, _ in store.held(1, seq + 5)] == list(range(1, seq + 6))
        store.close()
        assert verify_directory(directory).ok


def test_a_segment_is_sealed_once_its_oldest_record_is_old_enough(tmp_path):
    clock = Clock()
    store, _ = opened(tmp_path, segment_age=60, clock=clock)
    store.write(messages(1, 3))
    store.handle_timers(0.0)
    assert store.sealed_segments() == []
    clock.now += 61 * 10**6
    store.handle_timers(0.0)
    (sealed,) = store.sealed_segments()
    assert sealed.summary.last_seq == 3 and store.sealed_queue.get_nowait() is sealed
    store.write(messages(4, 4))
    store.close()
    assert segment_files(tmp_path) == sorted([log_name(1), summary_name(1), log_name(4)])


def test_retention_removes_what_it_should_and_nothing_else(tmp_path):
    clock = Clock()
    store, _ = opened(tmp_path, clock=clock)
    for hour in range(5):  # five sealed segments, received an hour apart: 10 records each
        store.write(messages(hour * 10 + 1, hour * 10 + 10))
        store.seal_active()
        clock.now += HOUR_US
    store.write(messages(51, 55))  # the active segment, received "now"
    store.write([Lost(56, 57, "not recovered")])
    (tmp_path / "parquet" / "keep.parquet").parent.mkdir()
    (tmp_path / "parquet" / "keep.parquet").write_bytes(b"pipeline data")
    for segment in store.sealed_segments()[:4]:
        store.mark_exported(segment)
    sizes = {s.summary.first_seq: s.summary.size for s in store.sealed_segments()}

    # age: the segments whose newest record is over 2.5 hours old go: 1, 11, 21 (31 is 2 hours old)
    removed = store.apply_retention(Retention(max_age=2.5 * 3600), require_export=True)
    assert [s.summary.first_seq for s in removed] == [1, 11, 21]
    assert segment_files(tmp_path) == sorted([log_name(31), summary_name(31), log_name(41), summary_name(41), log_name(51)])

    # size: 41 is not exported, so with Parquet on, size retention stops before it
    removed = store.apply_retention(Retention(max_bytes=1), require_export=True)
    assert [s.summary.first_seq for s in removed] == [31]
    assert store.apply_retention(Retention(max_bytes=1), require_export=True) == []
    # without Parquet output it may go, but never the segment being written
    removed = store.apply_retention(Retention(max_bytes=sizes[41] - 1), require_export=False)
    assert [s.summary.first_seq for s in removed] == [41]
    assert segment_files(tmp_path) == [log_name(51)]
    assert (tmp_path / "parquet" / "keep.parquet").read_bytes() == b"pipeline data"
    assert [s for s, _ in store.held(1, 60)] == [51, 52, 53, 54, 55]
    store.close()
    recorded, _, _ = parse_gaps((tmp_path / GAPS_FILE).read_bytes())
    assert [(g.from_seq, g.to_seq) for g in recorded] == [(56, 57)]
    report = verify_directory(tmp_path)
    assert report.ok and report.first_seq == 51
    _, start = opened(tmp_path)
    assert start == 58


def test_retention_by_size_keeps_the_newest_that_fit(tmp_path):
    store, _ = opened(tmp_path)
    for block in range(4):
        store.write(messages(block * 10 + 1, block * 10 + 10))
        store.seal_active()
    sizes = [s.summary.size for s in store.sealed_segments()]
    removed = store.apply_retention(Retention(max_bytes=sizes[2] + sizes[3]), require_export=False)
    assert [s.summary.first_seq for s in removed] == [1, 11]
    assert [s.summary.first_seq for s in store.sealed_segments()] == [21, 31]
    store.close()
