"""SequenceTracker.fill_run: re-DELIVERs that fill holes, taken one step per hole, exactly as one by one."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from fyrehose.protocol.tracker import Lost, Message, SequenceTracker

T0 = 10.0


def payload(seq: int) -> bytes:
    return seq.to_bytes(2, "big")


def one_by_one(tracker: SequenceTracker, first: int, count: int, now: float, requested: bool) -> tuple[list, int]:
    """The reference: each frame through deliver (a peer's only where a REQUESTed hole awaits it); the events and
    how many frames were taken."""
    events: list = []
    taken = 0
    for seq in range(first, first + count):
        if requested and not tracker.awaits(seq):
            continue
        duplicates = tracker.duplicates
        events += tracker.deliver(seq, payload(seq), now)
        taken += tracker.duplicates == duplicates
    return events, taken


def released(events) -> list[int]:
    out = []
    for event in events:
        out += range(event.from_seq, event.to_seq + 1) if isinstance(event, Lost) else [event.seq]
    return out


chunks = st.tuples(st.integers(1, 80), st.integers(1, 12), st.booleans())  # first, count, from a peer


@settings(deadline=None, max_examples=300)  # a loaded host may take longer than the default 200 ms
@given(st.integers(2, 80), st.lists(st.booleans(), min_size=1, max_size=80), st.lists(chunks, max_size=30),
       st.lists(st.booleans(), max_size=30))
def test_filling_runs_gives_what_one_by_one_gives(size, dropped, resends, polls):
    """Any stream with datagrams lost, then any re-sends (overlapping, duplicated, stale, from the backbone or a
    peer), with REQUEST rounds between them: the same events, holes and duplicates either way."""
    bulk, reference = SequenceTracker(1), SequenceTracker(1)
    now = T0
    for seq in range(1, size + 1):
        if not dropped[seq % len(dropped)] or seq == size:  # the last always arrives: holes lie below it
            assert bulk.deliver(seq, payload(seq), now) == reference.deliver(seq, payload(seq), now)
    for index, (first, count, requested) in enumerate(resends):
        now += 0.01
        if index < len(polls) and polls[index]:  # a REQUEST round: holes become awaited
            assert bulk.handle_timers(now + 1) == reference.handle_timers(now + 1)
        count = min(count, size - first + 1)
        if count < 1:
            continue
        expected, expected_taken = one_by_one(reference, first, count, now, requested)
        filled = bulk.fill_run(first, [payload(s) for s in range(first, first + count)], now, requested=requested)
        assert filled is not None  # at or below the highest sequence: always taken
        events, taken = filled
        assert events == expected
        assert sum(high - low + 1 for low, high in taken) == expected_taken
        assert all(first <= low <= high < first + count for low, high in taken)
        assert bulk.holes == reference.holes
        assert bulk.duplicates == reference.duplicates
        # one by one, a fill inside a hole splits it first, so its last part closes as a hole of its own
        # (a recovery more); a run filling that stretch at once closes no hole
        assert set(bulk.recoveries) <= set(reference.recoveries)
        assert len(bulk.recoveries) <= len(reference.recoveries)
        assert bulk.next == reference.next


@settings(deadline=None)
@given(st.integers(2, 60), st.lists(st.booleans(), min_size=1, max_size=60), st.integers(1, 20), st.randoms())
def test_under_a_tight_buffer_bound_every_sequence_still_comes_out_once_in_order(size, dropped, bound, rng):
    tracker = SequenceTracker(1, max_buffered=bound)
    out: list = []
    missing = []
    for seq in range(1, size + 1):
        if dropped[seq % len(dropped)] and seq != size:
            missing.append(seq)
        else:
            out += tracker.deliver(seq, payload(seq), T0)
    rng.shuffle(missing)
    for seq in missing:
        filled = tracker.fill_run(seq, [payload(seq)], T0)
        assert filled is not None
        out += filled[0]
    assert released(out) == list(range(1, size + 1))
    assert all(event.data == payload(event.seq) for event in out if isinstance(event, Message))


def test_a_run_beyond_the_highest_sequence_is_left_to_the_caller():
    tracker = SequenceTracker(1)
    tracker.deliver(1, b"a", T0)
    tracker.deliver(4, b"d", T0)
    assert tracker.fill_run(3, [b"c", b"d", b"e"], T0) is None
    assert tracker.holes == [(2, 3)]


def test_a_run_inside_a_hole_splits_it_and_each_part_counts_its_recovery():
    tracker = SequenceTracker(1)
    tracker.deliver(1, b"", T0)
    tracker.deliver(10, b"", T0)
    assert tracker.holes == [(2, 9)]
    events, taken = tracker.fill_run(4, [b"4", b"5"], T0 + 1)
    assert events == [] and taken == [(4, 5)]
    assert tracker.holes == [(2, 3), (6, 9)]
    events, taken = tracker.fill_run(1, [b"1", b"2", b"3"], T0 + 2)  # 1 is a duplicate
    assert taken == [(2, 3)] and tracker.duplicates == 1
    assert [m.seq for m in events] == [2, 3, 4, 5]
    assert list(tracker.recoveries) == [2.0]


def test_a_peer_fills_only_holes_already_requested():
    tracker = SequenceTracker(1)
    tracker.deliver(1, b"", T0)
    tracker.deliver(5, b"", T0)
    events, taken = tracker.fill_run(2, [b"2", b"3"], T0, requested=True)
    assert (events, taken) == ([], []) and tracker.duplicates == 0  # not asked for yet: a stranger's, not counted
    tracker.handle_timers(T0 + 1)
    events, taken = tracker.fill_run(2, [b"2", b"3", b"4"], T0 + 1, requested=True)
    assert taken == [(2, 4)] and [m.seq for m in events] == [2, 3, 4, 5]
    assert tracker.awaits_any(1, 10) is False
