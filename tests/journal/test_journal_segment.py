"""The journal's segment record codec: round trips, and torn or damaged tails never yield a wrong record."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fyrehose.journal.segment import (
    BAD_CHECKSUM,
    BAD_LENGTH,
    HEADER,
    INCOMPLETE,
    MAX_DATA,
    OVERHEAD,
    Record,
    SegmentError,
    decode_records,
    encode_record,
    log_name,
    parse_name,
    record_size,
    summary_name,
)

I64 = st.integers(-(1 << 63), (1 << 63) - 1)


@st.composite
def record_lists(draw, max_size=12):
    count = draw(st.integers(0, max_size))
    seq = draw(st.integers(1, 1 << 40))
    records = []
    for _ in range(count):
        seq += draw(st.integers(1, 1000))
        records.append(Record(seq, draw(I64), draw(st.binary(max_size=300))))
    return records


def encode_all(records):
    return b"".join(encode_record(*record) for record in records)


@given(record_lists())
def test_records_round_trip_with_their_offsets(records):
    buffer = encode_all(records)
    scan = decode_records(buffer)
    assert scan.records == records
    assert scan.stop is None and scan.end == len(buffer)
    sizes = [record_size(len(r.data)) for r in records]
    assert scan.offsets == [sum(sizes[:i]) for i in range(len(records))]


@given(record_lists(), st.data())
def test_a_truncated_buffer_yields_exactly_the_complete_records(records, data):
    buffer = encode_all(records)
    cut = data.draw(st.integers(0, len(buffer)))
    scan = decode_records(buffer[:cut])
    ends = [0]
    for record in records:
        ends.append(ends[-1] + record_size(len(record.data)))
    complete = max(i for i, end in enumerate(ends) if end <= cut)
    assert scan.records == records[:complete]
    assert scan.end == ends[complete]
    assert scan.stop == (None if cut == ends[complete] else INCOMPLETE)


@given(record_lists().filter(bool), st.data())
def test_any_damaged_byte_stops_the_scan_before_its_record(records, data):
    buffer = bytearray(encode_all(records))
    position = data.draw(st.integers(0, len(buffer) - 1))
    buffer[position] ^= data.draw(st.integers(1, 255))
    starts = [0]
    for record in records:
        starts.append(starts[-1] + record_size(len(record.data)))
    damaged = max(i for i, start in enumerate(starts[:-1]) if start <= position)
    scan = decode_records(bytes(buffer))
    assert scan.records == records[:damaged]
    assert scan.end == starts[damaged]
    assert scan.stop is not None


@given(record_lists(), st.binary(min_size=1, max_size=200))
def test_garbage_after_records_never_becomes_a_record(records, garbage):
    buffer = encode_all(records)
    scan = decode_records(buffer + garbage)
    after = decode_records(garbage)
    assert scan.records == records + after.records  # garbage is judged on its own, never merged into a record
    assert scan.end == len(buffer) + after.end
    assert scan.stop == after.stop


@given(record_lists(), st.data())
def test_scanning_from_a_record_boundary_yields_the_rest(records, data):
    buffer = encode_all(records)
    index = data.draw(st.integers(0, len(records)))
    start = sum(record_size(len(r.data)) for r in records[:index])
    assert decode_records(buffer, start).records == records[index:]


def test_zero_filled_tail_is_a_bad_checksum_not_a_record():
    # after a power loss a file can end in zeros: they must not read as sequence 0 or as anything else
    good = encode_record(5, 1, b"x")
    scan = decode_records(good + bytes(4096))
    assert scan.records == [Record(5, 1, b"x")]
    assert scan.stop == BAD_CHECKSUM and scan.end == len(good)


def test_an_impossible_length_stops_the_scan():
    scan = decode_records(HEADER.pack(1, 0, MAX_DATA + 1) + bytes(OVERHEAD))
    assert scan.records == [] and scan.stop == BAD_LENGTH


@pytest.mark.parametrize("args", [(0, 0, b""), (1 << 48, 0, b""), (1, 1 << 63, b""), (1, 0, bytes(MAX_DATA + 1))])
def test_unencodable_records_are_refused(args):
    with pytest.raises(SegmentError):
        encode_record(*args)


def test_largest_payload_round_trips():
    record = Record(1, 0, bytes(MAX_DATA))
    assert decode_records(encode_record(*record)).records == [record]


@settings(max_examples=200)
@given(st.integers(1, (1 << 48) - 2))  # every sequence number fits the 16 digits
def test_file_names_sort_by_sequence_and_parse_back(seq):
    assert parse_name(log_name(seq)) == (seq, ".log")
    assert parse_name(summary_name(seq)) == (seq, ".idx")
    assert log_name(seq) < log_name(seq + 1)


@pytest.mark.parametrize("name", ["seg-1.log", "seg-0000000000000001.log.tmp", "gaps.jsonl", "seg-000000000000000a.log"])
def test_other_names_are_not_segments(name):
    assert parse_name(name) is None
