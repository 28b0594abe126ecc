"""The journal's other pure parts: segment summaries, the gap index, retention, verify's range arithmetic, partitions."""
from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fyrehose.journal.gapindex import Gap, GapIndexError, encode_gap, parse_gaps, utc_iso
from fyrehose.journal.parquet import partition_of
from fyrehose.journal.retention import (
    Retention,
    SegmentState,
    expired_segments,
    parse_duration,
    parse_retention,
    parse_size,
)
from fyrehose.journal.segment import SegmentError, record_size
from fyrehose.journal.summary import SummaryBuilder, decode_summary, encode_summary
from fyrehose.journal.verify import Continuity, merge, subtract

# ---------------------------------------------------------------- summaries

appended = st.lists(st.tuples(st.integers(1, 50), st.integers(0, 10**12), st.integers(0, 2000)), min_size=1, max_size=60)


def build(entries, stride=1000):
    builder = SummaryBuilder(stride)
    seq = 0
    for step, received, length in entries:
        seq += step
        builder.add(seq, received, length)
    return builder.summary


@given(appended)
def test_summary_counts_and_round_trips(entries):
    summary = build(entries)
    assert summary.records == len(entries)
    assert summary.size == sum(record_size(length) for _, _, length in entries)
    assert summary.oldest == min(r for _, r, _ in entries) and summary.newest == max(r for _, r, _ in entries)
    assert decode_summary(encode_summary(summary)) == summary


@given(appended, st.data())
def test_index_offset_is_the_record_at_or_before_the_wanted_sequence(entries, data):
    summary = build(entries)
    offsets, seq, offset = {}, 0, 0
    for step, _, length in entries:
        seq += step
        offsets[seq] = offset
        offset += record_size(length)
    wanted = data.draw(st.integers(1, summary.last_seq + 5))
    found = summary.offset_before(wanted)
    at_or_before = [s for s in offsets if s <= wanted]
    seq_at = {o: s for s, o in offsets.items()}
    assert found in seq_at
    assert found <= (offsets[max(at_or_before)] if at_or_before else 0)
    assert seq_at[found] <= wanted or found == 0  # a scan from there meets every sequence >= wanted
    # every index entry is a real record start
    assert all(offsets[s] == o for s, o in summary.index)


def test_summary_refuses_descending_records():
    builder = SummaryBuilder()
    builder.add(5, 0, 1)
    with pytest.raises(SegmentError):
        builder.add(5, 0, 1)


@pytest.mark.parametrize("raw", [b"", b"{", b"[]", b'{"first_seq": 1}',
                                 b'{"first_seq":2,"last_seq":1,"records":1,"size":25,"oldest":0,"newest":0,'
                                 b'"index":[[2,0]],"exported":false}',
                                 b'{"first_seq":1,"last_seq":1,"records":1,"size":25,"oldest":0,"newest":0,'
                                 b'"index":[[1,5]],"exported":false}'])
def test_damaged_summaries_are_refused(raw):
    with pytest.raises(SegmentError):
        decode_summary(raw)


# ---------------------------------------------------------------- the gap index

gaps = st.builds(
    lambda a, n, t: Gap(a, a + n, utc_iso(t)),
    st.integers(1, 1 << 40), st.integers(0, 10**6), st.integers(0, 4 * 10**15),
)


@given(st.lists(gaps, max_size=20))
def test_gap_lines_round_trip(items):
    raw = b"".join(encode_gap(gap) for gap in items)
    assert parse_gaps(raw) == (items, len(raw), None)


@given(st.lists(gaps, min_size=1, max_size=10), st.data())
def test_a_torn_last_gap_line_is_left_out(items, data):
    raw = b"".join(encode_gap(gap) for gap in items)
    last_start = len(raw) - len(encode_gap(items[-1]))
    cut = data.draw(st.integers(last_start, len(raw) - 1))
    parsed, intact, problem = parse_gaps(raw[:cut])
    assert parsed == items[:-1] and intact == last_start
    assert problem == (None if cut == last_start else "incomplete last line")


def test_gap_lines_are_the_documented_json_and_utc():
    line = encode_gap(Gap(5, 9, utc_iso(1_700_000_000_123_456)))
    assert line == b'{"from_seq":5,"to_seq":9,"recorded_at":"2023-11-14T22:13:20.123456+00:00"}\n'
    assert datetime.fromisoformat("2023-11-14T22:13:20.123456+00:00").tzinfo == UTC


@pytest.mark.parametrize("line", [b'{"from_seq":5,"to_seq":4,"recorded_at":"2023-01-01T00:00:00+00:00"}\n',
                                  b'{"from_seq":0,"to_seq":4,"recorded_at":"2023-01-01T00:00:00+00:00"}\n',
                                  b'{"from_seq":"1","to_seq":4,"recorded_at":"2023-01-01T00:00:00+00:00"}\n',
                                  b'{"from_seq":1,"to_seq":4,"recorded_at":"yesterday"}\n',
                                  b'not json\n'])
def test_damaged_gap_lines_are_reported(line):
    good = encode_gap(Gap(1, 1, utc_iso(0)))
    parsed, intact, problem = parse_gaps(good + line + good)
    assert len(parsed) == 1 and intact == len(good) and "line 2" in problem


def test_an_invalid_gap_is_never_written():
    with pytest.raises(GapIndexError):
        encode_gap(Gap(3, 2, utc_iso(0)))


# ---------------------------------------------------------------- retention

@pytest.mark.parametrize("text, expected", [
    ("7d", Retention(max_age=7 * 86400)), ("90min", Retention(max_age=5400)), ("1.5h", Retention(max_age=5400)),
    ("2w", Retention(max_age=14 * 86400)), ("30s", Retention(max_age=30)),
    ("50GB", Retention(max_bytes=50 * 10**9)), ("512MiB", Retention(max_bytes=512 << 20)),
    ("10kb", Retention(max_bytes=10_000)), ("3 TiB", Retention(max_bytes=3 << 40)),
    # durations as every duration option takes them (fyrehose.runtime.argtypes.duration)
    ("15", Retention(max_age=15)), ("15s", Retention(max_age=15)), ("1m30s", Retention(max_age=90)),
    ("1h", Retention(max_age=3600)), ("2h10m5s", Retention(max_age=7805)), ("500ms", Retention(max_age=0.5)),
])
def test_retention_values(text, expected):
    assert parse_retention([text]) == expected


def test_retention_reads_m_as_minutes_like_every_duration_option():
    assert parse_retention(["5m"]) == Retention(max_age=300) and parse_retention(["1.5m"]) == Retention(max_age=90)


def test_retention_combines_age_and_size():
    assert parse_retention(["7d", "1GiB", "2d"]) == Retention(max_age=2 * 86400, max_bytes=1 << 30)


@pytest.mark.parametrize("text", ["5M", "0", "0s", "nan", "inf", "d", "-1d", "0GB", "5 parsecs", "1e3GB", "1m30"])
def test_bad_retention_values_are_refused(text):
    with pytest.raises(ValueError):
        parse_retention([text])


def test_sizes_and_durations_are_not_confused():
    assert parse_size("64MiB") == 64 << 20 and parse_duration("10min") == 600
    assert parse_duration("5m") == 300 and parse_duration("1m30s") == 90  # no size is wanted: m is minutes
    with pytest.raises(ValueError):
        parse_size("10min")
    with pytest.raises(ValueError):
        parse_duration("64MiB")


segment_states = st.lists(
    st.tuples(st.integers(1, 1000), st.integers(0, 10**6), st.booleans(), st.booleans()), min_size=1, max_size=12,
).map(lambda rows: [SegmentState(i * 1000 + 1, size, newest, sealed, exported)
                    for i, (size, newest, sealed, exported) in enumerate(rows)])


@given(segment_states, st.one_of(st.none(), st.integers(0, 10**6)), st.one_of(st.none(), st.integers(0, 12000)),
       st.integers(0, 2 * 10**6), st.booleans())
def test_retention_removes_an_oldest_first_prefix_and_only_what_it_must(states, age_us, max_bytes, now, require_export):
    retention = Retention(None if age_us is None else age_us / 1e6, max_bytes)
    expired = expired_segments(states, retention, now, require_export)
    count = len(expired)
    assert expired == [s.first_seq for s in states[:count]]  # a prefix, oldest first
    assert count < len(states)  # the newest always stays
    total = sum(s.size for s in states)
    for index, state in enumerate(states[:count]):
        assert state.sealed and (state.exported or not require_export)
        remaining = total - sum(s.size for s in states[:index])
        assert (age_us is not None and state.newest < now - age_us) or (max_bytes is not None and remaining > max_bytes)
    if count < len(states) - 1:  # it stopped early: the next one was not removable or not due
        nxt = states[count]
        remaining = total - sum(s.size for s in states[:count])
        due = (age_us is not None and nxt.newest < now - age_us) or (max_bytes is not None and remaining > max_bytes)
        assert not due or not nxt.sealed or (require_export and not nxt.exported)


# ---------------------------------------------------------------- verify's range arithmetic

ranges = st.lists(st.tuples(st.integers(1, 200), st.integers(0, 20)).map(lambda t: (t[0], t[0] + t[1])), max_size=10)


def members(items):
    return {seq for low, high in items for seq in range(low, high + 1)}


@given(ranges)
def test_merge_is_sorted_disjoint_and_covers_the_same(items):
    merged = merge(items)
    assert members(merged) == members(items)
    assert all(a[1] + 1 < b[0] for a, b in zip(merged, merged[1:]))


@given(ranges, ranges)
def test_subtract_is_set_difference(left, right):
    result = subtract(left, right)
    assert members(result) == members(left) - members(right)
    assert result == merge(result)


@given(st.lists(st.integers(1, 500), unique=True, min_size=1))
def test_continuity_finds_exactly_the_missing_sequences(seqs):
    seqs.sort()
    continuity = Continuity()
    assert all(continuity.add(seq) for seq in seqs)
    assert members(continuity.holes) == set(range(seqs[0], seqs[-1] + 1)) - set(seqs)
    assert not continuity.add(seqs[-1])


# ---------------------------------------------------------------- Parquet partitions

@pytest.mark.parametrize("moment, partition", [
    (datetime(2024, 5, 1, 13, 59, 59, 999999, tzinfo=UTC), "date=2024-05-01/hour=13"),
    (datetime(2024, 5, 1, 14, 0, tzinfo=UTC), "date=2024-05-01/hour=14"),
    (datetime(1999, 12, 31, 23, 30, tzinfo=UTC), "date=1999-12-31/hour=23"),
])
def test_partition_is_the_utc_hour_of_the_receive_time(moment, partition):
    micros = int(moment.timestamp()) * 10**6 + moment.microsecond
    assert partition_of(micros) == partition
