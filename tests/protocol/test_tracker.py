"""The subscriber's gap tracker, driven purely (no sockets, explicit time)."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fyrehose.protocol.tracker import Lost, Message, SequenceTracker


def seqs_of(events):
    out = []
    for event in events:
        if isinstance(event, Message):
            out.append(event.seq)
        else:
            out.extend(range(event.from_seq, event.to_seq + 1))
    return out


def test_in_order_messages_pass_straight_through():
    tracker = SequenceTracker()
    events = []
    for seq in range(5, 10):
        events += tracker.deliver(seq, b"m%d" % seq, 0.0)
    assert [(e.seq, e.data) for e in events] == [(s, b"m%d" % s) for s in range(5, 10)]
    assert tracker.handle_timers(1.0) == ([], [])


def test_gap_is_held_back_then_requested_then_filled():
    tracker = SequenceTracker(request_delay=0.05, retry_initial=0.1)
    assert seqs_of(tracker.deliver(1, b"", 0.0)) == [1]
    assert tracker.deliver(4, b"", 0.0) == []  # 2 and 3 missing: 4 waits
    assert tracker.handle_timers(0.01) == ([], [])  # not yet: reordering may still bring them
    requests, _ = tracker.handle_timers(0.06)
    assert requests == [(2, 3)]
    assert tracker.handle_timers(0.07) == ([], [])  # backing off
    assert tracker.handle_timers(0.17)[0] == [(2, 3)]  # retried
    assert seqs_of(tracker.deliver(3, b"", 0.2)) == []
    assert tracker.holes == [(2, 2)]
    assert seqs_of(tracker.deliver(2, b"", 0.2)) == [2, 3, 4]
    assert tracker.holes == []


def test_retries_back_off_up_to_the_maximum():
    tracker = SequenceTracker(request_delay=0.0, retry_initial=0.1, retry_max=0.4, give_up_after=100)
    tracker.deliver(1, b"", 0.0)
    tracker.deliver(3, b"", 0.0)
    times = []
    for step in range(0, 201):
        now = step / 100
        if tracker.handle_timers(now)[0]:
            times.append(now)
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert gaps[:4] == pytest.approx([0.1, 0.2, 0.4, 0.4], abs=0.011)
    assert max(gaps) <= 0.411


def test_unrecovered_gap_is_reported_lost_in_order_and_stream_continues():
    tracker = SequenceTracker(give_up_after=1.0)
    tracker.deliver(1, b"", 0.0)
    tracker.deliver(5, b"", 0.0)
    tracker.deliver(6, b"", 0.0)
    _, events = tracker.handle_timers(0.99)
    assert events == []
    _, events = tracker.handle_timers(1.0)
    assert events[0] == Lost(2, 4, "not recovered")
    assert seqs_of(events) == [2, 3, 4, 5, 6]
    assert tracker.lost == 3
    assert seqs_of(tracker.deliver(3, b"", 1.1)) == []  # too late: already reported lost
    assert seqs_of(tracker.deliver(7, b"", 1.1)) == [7]


def test_duplicates_are_discarded():
    tracker = SequenceTracker()
    events = []
    for seq in (1, 1, 3, 3, 2, 2, 1):
        events += tracker.deliver(seq, b"", 0.0)
    assert seqs_of(events) == [1, 2, 3]
    assert tracker.duplicates == 4


def test_start_position_backfills_older_messages():
    tracker = SequenceTracker(start=10, request_delay=0.0)
    assert tracker.deliver(13, b"", 0.0) == []
    assert tracker.handle_timers(0.0)[0] == [(10, 12)]
    assert tracker.deliver(5, b"", 0.0) == []  # before the start: not wanted
    events = tracker.deliver(10, b"", 0.0) + tracker.deliver(11, b"", 0.0) + tracker.deliver(12, b"", 0.0)
    assert seqs_of(events) == [10, 11, 12, 13]


def test_head_reveals_a_lost_tail():
    tracker = SequenceTracker(request_delay=0.0, head_delay=0.0)
    tracker.deliver(1, b"", 0.0)
    tracker.head(4, 0.0)
    assert tracker.handle_timers(0.0)[0] == [(2, 4)]
    tracker.head(3, 0.0)  # older news changes nothing
    assert tracker.holes == [(2, 4)]


def test_head_before_any_message_with_a_start_position():
    tracker = SequenceTracker(start=1, request_delay=0.0, head_delay=0.0)
    tracker.head(3, 0.0)
    assert tracker.handle_timers(0.0)[0] == [(1, 3)]


def test_a_hole_known_only_from_head_waits_for_its_delivers():
    tracker = SequenceTracker(request_delay=0.02, head_delay=0.5)
    tracker.deliver(1, b"", 0.0)
    tracker.head(3, 0.0)
    assert tracker.handle_timers(0.1)[0] == []  # the DELIVERs are usually just behind the ACK
    assert seqs_of(tracker.deliver(2, b"", 0.2) + tracker.deliver(3, b"", 0.2)) == [2, 3]
    tracker.head(5, 1.0)
    assert tracker.handle_timers(1.49)[0] == []
    assert tracker.handle_timers(1.5)[0] == [(4, 5)]


def test_a_wide_hole_is_not_asked_again_before_its_answer_could_stream_in():
    tracker = SequenceTracker(request_delay=0.0, retry_initial=0.1, forward_rate=10_000, give_up_after=100)
    tracker.deliver(1, b"", 0.0)
    tracker.deliver(20_002, b"", 0.0)  # 20,000 missing: 2 s at 10,000/s
    assert tracker.handle_timers(0.0)[0]
    assert tracker.handle_timers(1.9)[0] == []
    assert tracker.handle_timers(2.0)[0]


def test_wide_holes_are_requested_in_bounded_spans():
    tracker = SequenceTracker(request_delay=0.0, max_request_span=100)
    tracker.deliver(1, b"", 0.0)
    tracker.deliver(252, b"", 0.0)
    requests, _ = tracker.handle_timers(0.0)
    assert requests == [(2, 101), (102, 201), (202, 251)]


def test_buffer_bound_gives_up_the_oldest_hole_early():
    tracker = SequenceTracker(max_buffered=3, give_up_after=100)
    tracker.deliver(1, b"", 0.0)
    events = []
    for seq in range(3, 7):
        events += tracker.deliver(seq, b"", 0.0)
    assert events[0] == Lost(2, 2, "buffer full")
    assert seqs_of(events) == [2, 3, 4, 5, 6]


@settings(max_examples=200, deadline=None)
@given(
    count=st.integers(1, 300),
    data=st.data(),
)
def test_any_arrival_order_with_duplicates_yields_each_sequence_once_in_order(count, data):
    """Shuffle, duplicate and drop; after recovery everything comes out exactly once, in order."""
    order = data.draw(st.permutations(range(1, count + 1)))
    duplicates = data.draw(st.lists(st.sampled_from(range(1, count + 1)), max_size=20))
    dropped = set(data.draw(st.lists(st.sampled_from(range(2, count + 1)), max_size=10))) if count > 1 else set()
    arrivals = [s for s in list(order) + duplicates if s not in dropped]
    tracker = SequenceTracker(start=1, request_delay=0.0, head_delay=0.0, give_up_after=5.0)
    events = []
    now = 0.0
    for seq in arrivals:
        events += tracker.deliver(seq, str(seq).encode(), now)
        now += 0.001
    tracker.head(count, now)
    requested = set()
    for _ in range(3):
        requests, released = tracker.handle_timers(now)
        events += released
        for first, last in requests:
            requested.update(range(first, last + 1))
        for seq in sorted(dropped):  # a journal answers every REQUEST
            events += tracker.deliver(seq, str(seq).encode(), now)
        now += 0.5
    assert dropped <= requested
    assert seqs_of(events) == list(range(1, count + 1))
    assert all(e.data == str(e.seq).encode() for e in events if isinstance(e, Message))


@settings(max_examples=100, deadline=None)
@given(count=st.integers(2, 200), data=st.data())
def test_unanswered_holes_become_explicit_losses(count, data):
    dropped = set(data.draw(st.lists(st.sampled_from(range(2, count + 1)), min_size=1, max_size=10)))
    tracker = SequenceTracker(start=1, give_up_after=1.0)
    events = []
    for seq in range(1, count + 1):
        if seq not in dropped:
            events += tracker.deliver(seq, b"", 0.0)
    tracker.head(count, 0.0)
    _, released = tracker.handle_timers(2.0)
    events += released
    assert seqs_of(events) == list(range(1, count + 1))
    lost = {s for e in events if isinstance(e, Lost) for s in range(e.from_seq, e.to_seq + 1)}
    assert lost == dropped


@given(st.lists(st.integers(1, 30), max_size=40), st.integers(1, 30), st.integers(1, 8))
def test_a_run_is_taken_whole_exactly_when_it_continues_the_stream(before, first, length):
    one_by_one, whole = SequenceTracker(1), SequenceTracker(1)
    for seq in before:
        one_by_one.deliver(seq, b"%d" % seq, 0.0)
        whole.deliver(seq, b"%d" % seq, 0.0)
    payloads = [b"%d" % seq for seq in range(first, first + length)]
    continues = first == whole.next and not whole.holes and not one_by_one.handle_timers(0.0)[1]
    events = whole.deliver_run(first, payloads)
    expected = [event for seq, payload in zip(range(first, first + length), payloads)
                for event in one_by_one.deliver(seq, payload, 0.0)]
    if continues:
        assert events == expected and (whole.next, whole.holes) == (one_by_one.next, one_by_one.holes)
        assert all(type(event) is Message for event in events)  # named tuples, as deliver() makes them
    else:
        assert events is None
