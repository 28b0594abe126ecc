"""The pair's datagrams: every frame round-trips, records split where a datagram would overflow, and whatever
bytes arrive on the pair port decode to a frame or a reason, never an exception."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from fyrehose.backbone.pair import frames
from fyrehose.backbone.pushes import LogEntry
from fyrehose.protocol import codec

SOURCE = ("10.0.0.7", 40000)


def delivers(first: int, payloads: list[bytes]) -> tuple[bytes, LogEntry]:
    data = b"".join(codec.encode_deliver(first + i, p) for i, p in enumerate(payloads))
    return data, LogEntry(memoryview(data), len(payloads))


def test_a_record_carries_its_frames_publisher_and_tag_runs():
    data, entry = delivers(100, [b"a", b"bb", b"ccc"])
    runs = [(7, 2, 100), (20, 1, 102)]
    encoded, = frames.records_for(3, entry, 100, SOURCE, runs)
    record = frames.decode(encoded)
    assert record == frames.Record(3, 100, 102, SOURCE, runs, data)


def test_a_record_too_large_for_one_datagram_is_split_between_frames_with_its_runs_clipped():
    payloads = [bytes(1000)] * 200  # about 200 kB of frames
    data, entry = delivers(1, payloads)
    runs = [(1000, 200, 1)]
    encoded = frames.records_for(1, entry, 1, SOURCE, runs)
    assert len(encoded) > 3 and all(len(d) <= codec.MAX_DATAGRAM for d in encoded)
    records = [frames.decode(d) for d in encoded]
    assert [r.first for r in records] == [1] + [r.last + 1 for r in records[:-1]] and records[-1].last == 200
    assert b"".join(r.frames for r in records) == data
    for r in records:
        assert r.runs == [(1000 + r.first - 1, r.last - r.first + 1, r.first)]


def test_a_full_datagram_of_frames_of_one_size_splits_without_listing_its_frames():
    data = b"".join(codec.encode_deliver(10 + i, bytes(56)) for i in range(1007))  # 65,455 bytes, one size
    entry = LogEntry(memoryview(data), 1007, 65)
    records = [frames.decode(d) for d in frames.records_for(1, entry, 10, SOURCE, [(5, 1007, 10)])]
    assert len(records) == 2 and entry.bounds is None  # with its header and digest it would not fit one
    assert b"".join(r.frames for r in records) == data and records[1].first == records[0].last + 1
    assert sum(r.runs[0][1] for r in records) == 1007


def test_a_sealed_datagram_opens_only_with_its_key():
    key = bytes(range(32))
    sealed = frames.seal(frames.encode_ack(1, 2, 3), key)
    assert frames.unseal(sealed, key) == frames.encode_ack(1, 2, 3)
    assert frames.unseal(sealed, bytes(32)) is None
    assert frames.unseal(sealed[:-1] + bytes([sealed[-1] ^ 1]), key) is None
    assert frames.unseal(sealed[:16], key) is None


def test_state_members_spill_over_several_datagrams_each_with_the_header():
    members = [frames.Member((f"10.1.{i // 250}.{i % 250}", 1000 + i), codec.FLAG_BATCH, i % 5000)
               for i in range(10000)]
    encoded = frames.encode_state(9, frames.ROLE_PRIMARY, frames.STATE_SYNC, 500, 480, 16884, 900, members)
    assert len(encoded) == 3 and all(len(d) <= codec.MAX_DATAGRAM for d in encoded)
    states = [frames.decode(d) for d in encoded]
    assert all((s.epoch, s.last_issued, s.delivered, s.want, s.clean_ms) == (9, 500, 480, 16884, 900)
               for s in states)
    assert [m for s in states for m in s.members] == members


def test_ack_and_replay_round_trip_and_a_replay_must_name_a_range():
    assert frames.decode(frames.encode_ack(4, 10, 20)) == frames.Ack(4, 10, 20)
    assert frames.decode(frames.encode_replay(4, 11, 19)) == frames.Replay(4, 11, 19)
    assert frames.decode(frames.encode_replay(4, 19, 11)) == "bad range"
    assert frames.decode(frames.encode_replay(4, 0, 11)) == "bad range"


def test_a_recover_round_trips_and_must_name_a_range_of_its_size():
    assert frames.decode(frames.encode_recover(3, 21, 40)) == frames.Recover(3, 21, 40)
    assert frames.decode(frames.encode_recover(3, 40, 21)) == "bad range"
    assert frames.decode(frames.encode_recover(3, 0, 2)) == "bad range"
    assert frames.decode(frames.encode_recover(3, 1, 2)[:-1]) == "bad size"


def test_forged_records_are_refused_with_a_reason():
    data, entry = delivers(5, [b"x", b"y"])
    good, = frames.records_for(1, entry, 5, SOURCE, [(1, 2, 5)])
    assert frames.decode(good[:-1]) == "malformed frames"
    uneven = b"".join(codec.encode_deliver(5 + i, p) for i, p in enumerate([b"a", b"bb", b"c"]))
    assert frames.decode(frames.encode_record(1, 5, 6, SOURCE, [], uneven)) == \
        "frames do not match the record's range"
    skips = b"".join(codec.encode_deliver(seq, b"z") for seq in (5, 7))
    assert frames.decode(frames.encode_record(1, 5, 6, SOURCE, [], skips)) == "frames do not match the record's range"
    claims_more = bytearray(good)
    claims_more[11] = 7  # LAST says 7: three frames promised, two carried
    assert frames.decode(bytes(claims_more)) == "frames do not match the record's range"
    outside = frames.encode_record(1, 5, 6, SOURCE, [(1, 3, 5)], data)
    assert frames.decode(outside) == "run outside the record"
    assert frames.decode(b"") == "empty" and frames.decode(b"\x01abc") == "unknown type"
    assert frames.decode(good[:20]) == "truncated"


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=400),
       st.sampled_from([frames.RECORD, frames.STATE, frames.ACK, frames.REPLAY, frames.RECOVER, 0x7F]))
def test_any_bytes_decode_to_a_frame_or_a_reason(body, kind):
    result = frames.decode(bytes([kind]) + body)
    assert isinstance(result, str | frames.Record | frames.State | frames.Ack | frames.Replay | frames.Recover)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=3000), min_size=1, max_size=60), st.integers(1, 2**40),
       st.lists(st.tuples(st.integers(1, 2**40), st.integers(1, 60)), max_size=10))
def test_split_records_always_reassemble_to_the_entry_and_its_runs(payloads, first, raw_runs):
    data, entry = delivers(first, payloads)
    last = first + len(payloads) - 1
    runs = frames.clip_runs([(tag, count, first + offset % len(payloads)) for offset, (tag, count) in
                             enumerate(raw_runs)], first, last)
    records = [frames.decode(d) for d in frames.records_for(2, entry, first, SOURCE, runs)]
    assert b"".join(r.frames for r in records) == data
    tagged = {seq: tag + seq - s for tag, count, s in runs for seq in range(s, s + count)}
    rebuilt = {seq: tag + seq - s for r in records for tag, count, s in r.runs for seq in range(s, s + count)}
    assert rebuilt == tagged
