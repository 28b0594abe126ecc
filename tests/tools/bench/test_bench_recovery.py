"""The bench's fyrehose subscribers notice, REQUEST and time holes; answers stay out of the loss count."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from fyrehose.protocol import codec
from fyrehose.protocol.tracker import SequenceTracker
from fyrehose.tools.bench.recovery import HoleRecovery

T0 = 50.0


def datagram(first: int, count: int, size: int = 8) -> bytes:
    return b"".join(codec.encode_deliver(seq, bytes(size)) for seq in range(first, first + count))


def test_in_order_datagrams_are_never_answers_and_leave_no_hole():
    recovery = HoleRecovery(SequenceTracker())
    for first in range(1, 100, 10):
        assert not recovery.take(datagram(first, 10), lambda: T0)
    assert recovery.tracker.holes == [] and recovery.tracker.next == 101


def test_a_lost_datagram_is_requested_and_its_answer_counted_as_recovered_and_timed():
    tracker = SequenceTracker(request_delay=0.02)
    recovery = HoleRecovery(tracker)
    recovery.take(datagram(1, 10), lambda: T0)
    assert not recovery.take(datagram(21, 10), lambda: T0 + 0.001)  # 11..20 lost: noticed
    assert tracker.handle_timers(T0 + 0.021)[0] == [(11, 20)]
    assert recovery.take(datagram(11, 10), lambda: T0 + 0.025)  # the answer: not for the scanner
    assert recovery.recovered == 10 and tracker.holes == []
    assert [round(s, 6) for s in tracker.recoveries] == [0.024]


def test_a_peers_answer_fills_only_awaited_frames_and_a_forged_one_nothing():
    tracker = SequenceTracker(request_delay=0.02)
    recovery = HoleRecovery(tracker)
    recovery.take(datagram(1, 10), lambda: T0)
    recovery.take(datagram(21, 10), lambda: T0 + 0.001)  # 11..20 lost
    recovery.take_peer(datagram(11, 10), lambda: T0 + 0.002)  # before any REQUEST: nobody asked a peer yet
    assert tracker.handle_timers(T0 + 0.021)[0] == [(11, 20)]
    recovery.take_peer(datagram(31, 10), lambda: T0 + 0.022)  # forged: beyond the stream, awaited by no hole
    recovery.take_peer(datagram(1, 5), lambda: T0 + 0.022)  # stale: already delivered
    assert recovery.strangers == 3 and recovery.recovered == 0 and tracker.holes == [(11, 20)]
    recovery.take_peer(datagram(16, 10), lambda: T0 + 0.03)  # 16..20 answer the hole; 21..25 are not taken again
    assert recovery.recovered == 5 and tracker.holes == [(11, 15)] and recovery.strangers == 3
    recovery.take_peer(datagram(11, 5), lambda: T0 + 0.04)
    assert recovery.recovered == 10 and tracker.holes == [] and tracker.next == 31


def test_a_late_original_before_any_request_is_not_an_answer():
    recovery = HoleRecovery(SequenceTracker())
    recovery.take(datagram(1, 5), lambda: T0)
    recovery.take(datagram(11, 5), lambda: T0)
    assert not recovery.take(datagram(6, 5), lambda: T0 + 0.001)  # reordered, not REQUESTed yet
    assert recovery.recovered == 0 and recovery.tracker.holes == []


@settings(deadline=None)  # a loaded host may take longer than the default 200 ms
@given(st.lists(st.integers(1, 6), min_size=1, max_size=40), st.data())
def test_every_sequence_is_tracked_once_whatever_is_lost_and_answered(counts, data):
    tracker = SequenceTracker(1, request_delay=0.0)
    recovery = HoleRecovery(tracker)
    now = T0
    seq = 1
    lost = []
    for count in counts:
        if data.draw(st.booleans()):
            recovery.take(datagram(seq, count), lambda at=now: at)
        else:
            lost.append((seq, count))
        seq += count
        now += 0.001
    recovery.take(datagram(seq, 1), lambda: now)  # the tail, so every loss is a hole
    tracker.handle_timers(now)
    answered = 0
    for first, count in lost:
        assert recovery.take(datagram(first, count), lambda: now)
        answered += count
    assert recovery.recovered == answered and tracker.holes == [] and tracker.next == seq + 1


@settings(deadline=None)  # a loaded host may take longer than the default 200 ms
@given(st.lists(st.one_of(
    st.binary(max_size=80),
    st.builds(lambda first, count, size: datagram(first, count, size),
              st.integers(1, 2**48 - 40), st.integers(1, 5), st.integers(0, 12)),
    st.builds(lambda body: bytes([codec.DELIVER]) + body, st.binary(max_size=60)),
), max_size=30))
def test_forged_or_malformed_datagrams_never_break_the_recovery(datagrams):
    recovery = HoleRecovery(SequenceTracker())
    for index, data in enumerate(datagrams):
        recovery.take(data, lambda at=T0 + index: at)
    recovery.tracker.handle_timers(T0 + 100)
    assert recovery.recovered >= 0
