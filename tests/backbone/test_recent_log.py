"""The backbone's own log of recent messages: a byte ring that always holds the newest whole datagrams."""
from __future__ import annotations

import gc

from hypothesis import given
from hypothesis import strategies as st

from fyrehose.backbone.pushes import LogEntry
from fyrehose.backbone.recent_log import RecentLog
from fyrehose.protocol import codec


def entry(first: int, payloads: list[bytes]) -> LogEntry:
    frames = [codec.encode_deliver(first + i, data) for i, data in enumerate(payloads)]
    sizes = {len(frame) for frame in frames}
    return LogEntry(memoryview(b"".join(frames)), len(frames), sizes.pop() if len(sizes) == 1 else 0)


datagrams = st.lists(st.one_of(
    st.lists(st.binary(max_size=20), min_size=1, max_size=6),  # frames of any sizes
    st.tuples(st.integers(1, 8), st.binary(max_size=12)).map(lambda n_data: [n_data[1]] * n_data[0]),  # uniform
), min_size=1, max_size=40)


@given(datagrams, st.integers(1, 600), st.integers(1, 30))
def test_it_holds_a_suffix_of_whole_datagrams_within_its_size_and_returns_them_exactly(batches, capacity, per_add):
    log = RecentLog(capacity)
    frames: dict[int, bytes] = {}
    seq = 1
    entries = []
    for payloads in batches:
        entries.append(entry(seq, payloads))
        for data in payloads:
            frames[seq] = codec.encode_deliver(seq, data)
            seq += 1
    for start in range(0, len(entries), per_add):
        log.add(entries[start:start + per_add])
    last = seq - 1
    held = {s: bytes(frame) for s, frame in log.frames(1, last)}
    assert all(held[s] == frames[s] for s in held)
    assert log.bytes <= capacity
    if held:
        assert sorted(held) == list(range(min(held), last + 1))  # the newest messages, none missing
        assert log.first == min(held)
    if len(entries[-1].view) <= capacity:
        assert last in held  # the newest datagram always fits
    lo, hi = last // 3 + 1, 2 * last // 3 + 1
    assert [s for s, _ in log.frames(lo, hi)] == [s for s in sorted(held) if lo <= s <= hi]


@given(datagrams, st.integers(1, 600), st.integers(0, 120), datagrams)
def test_what_is_dropped_after_a_number_is_gone_and_the_ring_goes_on_from_there(batches, capacity, keep, more):
    log = RecentLog(capacity)
    seq = 1
    for payloads in batches:
        log.add([entry(seq, payloads)])
        seq += len(payloads)
    before = {s: bytes(frame) for s, frame in log.frames(1, seq)}
    log.drop_after(keep)  # the entries that begin above `keep` go; one that straddles it stays whole
    after = {s: bytes(frame) for s, frame in log.frames(1, seq)}
    assert after.items() <= before.items() and log.bytes <= capacity
    assert all(s <= keep for s in after) or min(s for s in after if s > keep) - 1 <= keep
    assert not after or all(s in after for s in before if min(after) <= s <= keep)
    seq = max(after, default=0) + 1
    for payloads in more:  # numbered on from what it still holds
        log.add([entry(seq, payloads)])
        seq += len(payloads)
    again = {s: bytes(frame) for s, frame in log.frames(1, seq)}
    assert log.bytes <= capacity and (not again or sorted(again) == list(range(min(again), seq)))


def test_nothing_is_kept_with_no_room():
    log = RecentLog(0)
    log.add([entry(1, [b"x"])])
    assert len(log) == 0 and log.first is None and log.frames(1, 1) == []


def test_it_gives_the_garbage_collector_nothing_to_walk():
    log = RecentLog(1 << 20)
    before = len(gc.get_objects())
    log.add([entry(seq, [b"m"]) for seq in range(1, 10_001)])
    gc.collect()
    assert len(gc.get_objects()) - before < 100  # the index holds integers; the frames live in the ring
    assert len(log) == 10_000
