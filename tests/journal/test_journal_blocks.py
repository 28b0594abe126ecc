"""Format 2 of journal segments (whole DELIVER datagrams as blocks) and reading journals written in format 1."""
from __future__ import annotations

import tarfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fyrehose.journal.reader import FileScan, list_segments, read_frames
from fyrehose.journal.segment import (
    BAD_CHECKSUM,
    BAD_FRAMES,
    FILE_HEADER,
    FORMAT_BLOCKS,
    FORMAT_RECORDS,
    INCOMPLETE,
    Block,
    SegmentError,
    block_records,
    cut_frames,
    decode_blocks,
    encode_block,
    segment_format,
)
from fyrehose.journal.store import JournalStore
from fyrehose.journal.verify import verify_directory
from fyrehose.protocol import codec
from fyrehose.protocol.frame_run import FrameRun
from fyrehose.protocol.tracker import Lost, Message

FORMAT1 = Path(__file__).resolve().parents[1] / "data" / "journal-format1.tar"  # written by the format-1 writer: 1..60, 41..42 lost


def datagram(first, payloads):
    return b"".join(codec.encode_deliver(first + i, p) for i, p in enumerate(payloads))


payload_lists = st.lists(st.binary(max_size=40), min_size=1, max_size=20)
block_lists = st.lists(st.tuples(st.integers(1, 5), payload_lists), min_size=1, max_size=6)


def blocks_of(spec):
    blocks, seq = [], 1
    for skip, payloads in spec:
        seq += skip - 1
        blocks.append(Block(seq, len(payloads), seq * 10, datagram(seq, payloads)))
        seq += len(payloads)
    return blocks


@given(block_lists)
def test_blocks_round_trip_with_their_offsets_and_messages(spec):
    blocks = blocks_of(spec)
    encoded = [encode_block(*b) for b in blocks]
    scan = decode_blocks(b"".join(encoded))
    assert scan.stop is None and scan.blocks == blocks
    assert scan.offsets == [sum(map(len, encoded[:i])) for i in range(len(encoded))]
    for block, (_, payloads) in zip(blocks, spec):
        records = block_records(block)
        assert [(r.seq, r.received_at, r.data) for r in records] == [
            (block.first + i, block.received_at, p) for i, p in enumerate(payloads)]


@given(block_lists, st.data())
def test_a_cut_or_a_damaged_byte_keeps_exactly_the_blocks_before_it(spec, data):
    blocks = blocks_of(spec)
    buffer = bytearray(b"".join(encode_block(*b) for b in blocks))
    at = data.draw(st.integers(0, len(buffer) - 1))
    truncated = decode_blocks(bytes(buffer[:at]))
    assert truncated.blocks == [b for b, o in zip(blocks, decode_blocks(bytes(buffer)).offsets)
                                if o + len(encode_block(*b)) <= at]
    assert truncated.stop in (None, INCOMPLETE)
    buffer[at] ^= 0x5A
    damaged = decode_blocks(bytes(buffer))
    assert damaged.end <= at and damaged.blocks == blocks[:len(damaged.blocks)]
    assert damaged.stop is not None


def test_a_block_whose_frames_do_not_match_its_header_is_damage():
    frames = datagram(5, [b"a", b"b"])
    assert decode_blocks(encode_block(6, 2, 0, frames)).stop == BAD_FRAMES
    assert decode_blocks(encode_block(5, 3, 0, frames)).stop == BAD_FRAMES
    assert decode_blocks(encode_block(5, 2, 0, frames)[:-1] + b"\0").stop == BAD_CHECKSUM


@given(payload_lists, st.data())
def test_frames_are_cut_at_frame_boundaries_to_a_range(payloads, data):
    block = Block(100, len(payloads), 0, datagram(100, payloads))
    low = data.draw(st.integers(90, 100 + len(payloads)))
    high = data.draw(st.integers(low, 110 + len(payloads)))
    cut = cut_frames(block, low, high)
    wanted = [(100 + i, p) for i, p in enumerate(payloads) if low <= 100 + i <= high]
    spans, error = codec.scan(cut, codec.DELIVER) if cut else ([], None)
    assert error is None
    assert [(seq, cut[start + codec.FRAME_HEADER:end]) for start, end, seq in spans] == wanted


def test_formats_are_told_apart_by_the_first_bytes():
    assert segment_format(FILE_HEADER) == FORMAT_BLOCKS
    assert segment_format(FILE_HEADER[:3]) is None and segment_format(b"") is None
    assert segment_format((7).to_bytes(8, "big")) == FORMAT_RECORDS
    with pytest.raises(SegmentError, match="newer"):
        segment_format(FILE_HEADER[:-1] + b"\x09")


def test_whole_datagrams_are_stored_as_they_arrived_and_served_cut_to_a_range(tmp_path):
    store = JournalStore(tmp_path, clock=lambda: 7)
    store.open()
    first = datagram(1, [b"x%d" % i for i in range(1, 11)])
    store.write([FrameRun(1, 10, len(first) // 10, first), Message(11, b"eleven"), Lost(12, 13, "not recovered"),
                 Message(14, b"fourteen")])
    (log,) = (tmp_path / "segments").glob("*.log")
    raw = log.read_bytes()
    assert raw.startswith(FILE_HEADER) and first in raw  # the datagram's bytes, unchanged
    assert [(s, d) for s, d in store.held(9, 14)] == [(9, b"x9"), (10, b"x10"), (11, b"eleven"), (14, b"fourteen")]
    segment = store._active
    assert [(a, b) for a, b, _ in read_frames(segment.path, 3, 11, 0, segment.size)] == [(3, 10), (11, 11)]
    store.close()
    assert verify_directory(tmp_path).ok


def test_a_format_1_journal_is_read_verified_served_and_continued_in_format_2(tmp_path):
    directory = tmp_path / "j"
    with tarfile.open(FORMAT1) as archive:
        archive.extractall(directory, filter="data")
    before = verify_directory(directory)
    assert before.ok, before.problems
    assert (before.first_seq, before.last_seq, before.records) == (1, 60, 58)
    store = JournalStore(directory, segment_bytes=1000)
    assert store.open() == 61
    assert list(store.held(39, 44)) == [(s, b"format one %d" % s) for s in (39, 40, 43, 44)]
    store.write([Message(seq, b"format two %d" % seq) for seq in range(61, 71)])
    store.close()
    segments, _ = list_segments(directory)
    formats = []
    for segment in segments:
        scan = FileScan(segment.path)
        list(scan.units())
        formats.append(scan.format)
    assert formats == [FORMAT_RECORDS, FORMAT_RECORDS, FORMAT_RECORDS, FORMAT_BLOCKS]  # the old tail was sealed
    after = verify_directory(directory)
    assert after.ok, after.problems
    assert (after.first_seq, after.last_seq, after.records) == (1, 70, 68)


@settings(max_examples=10, deadline=None)
@given(st.lists(st.integers(1, 30), min_size=1, max_size=6))
def test_sequences_are_never_stored_twice_across_a_restart(batches):
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        store = JournalStore(tmp, segment_bytes=400)
        store.open()
        seq = 1
        for count in batches:
            payloads = [b"p%d" % s for s in range(seq, seq + count)]
            data = datagram(seq, payloads)
            store.write([FrameRun(seq, count, len(data) // count, data)] if len(set(map(len, payloads))) == 1
                        else [Message(s, p) for s, p in zip(range(seq, seq + count), payloads)])
            seq += count
        store.close()
        store = JournalStore(tmp, segment_bytes=400)
        assert store.open() == seq
        with pytest.raises(RuntimeError, match="broke order"):
            store.write([Message(seq - 1, b"again")])
        assert [s for s, _ in store.held(1, seq)] == list(range(1, seq))
        store.close()
