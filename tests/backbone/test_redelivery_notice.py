"""A client asks again promptly when the backbone says it re-DELIVERs a range itself (FLAG_REDELIVERING)."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from memnet import BACKBONE, MemoryNetwork

from fyrehose.protocol import codec
from fyrehose.protocol.connection import BackboneConnection, ConnectionOptions
from fyrehose.protocol.tracker import SequenceTracker

T0 = 100.0


def tracker_with_hole(first: int = 2, last: int = 9) -> SequenceTracker:
    tracker = SequenceTracker(1)
    tracker.deliver(1, b"a", T0)
    tracker.deliver(last + 1, b"z", T0)  # first..last missing
    assert tracker.holes == [(first, last)]
    return tracker


def test_after_the_notice_the_hole_is_asked_again_at_the_prompt_interval_not_after_the_back_off():
    tracker = tracker_with_hole()
    assert tracker.handle_timers(T0 + 0.02)[0] == [(2, 9)]
    tracker.backbone_answers(2, 9, T0 + 0.021)
    due = T0 + 0.021 + 0.02 + 8 / 1_000_000
    assert tracker.next_deadline() == due
    assert tracker.handle_timers(due - 1e-4)[0] == []
    assert tracker.handle_timers(due)[0] == [(2, 9)]


def test_without_the_notice_the_back_off_stands():
    tracker = tracker_with_hole()
    tracker.handle_timers(T0 + 0.02)
    assert tracker.handle_timers(T0 + 0.06)[0] == []  # a peer's turn: 0.1 s back-off
    assert tracker.handle_timers(T0 + 0.12)[0] == [(2, 9)]


@settings(deadline=None)  # a loaded host may take longer than the default 200 ms
@given(st.lists(st.tuples(st.integers(1, 50), st.integers(0, 20)), min_size=1, max_size=10),
       st.integers(1, 60), st.integers(0, 30), st.floats(0.0, 1.0))
def test_a_notice_brings_every_overlapping_holes_next_request_within_the_prompt_interval(
        arrivals, lo, width, delay):
    tracker = SequenceTracker(1, give_up_after=100.0)
    for seq, _ in arrivals:
        tracker.deliver(seq, b"x", T0)
    tracker.handle_timers(T0 + 0.02)
    now = T0 + 0.02 + delay
    hi = lo + width
    before = {(h.first, h.last): h.next_request for h in tracker._holes}
    tracker.backbone_answers(lo, hi, now)
    for hole in tracker._holes:
        overlap = min(hole.last, hi) - max(hole.first, lo) + 1
        if overlap > 0:
            assert hole.next_request == now + tracker.redelivery_retry + overlap / tracker.redelivery_rate
        else:
            assert hole.next_request == before[(hole.first, hole.last)]


def test_the_connection_takes_a_forward_to_nowhere_from_the_backbone_as_the_notice_and_serves_nothing():
    connection = BackboneConnection(BACKBONE, ConnectionOptions(flags=codec.FLAG_REDELIVERING))
    tracker = connection.track(1)
    tracker.deliver(1, b"a", T0)
    tracker.deliver(5, b"e", T0)
    tracker.handle_timers(T0 + 0.02)
    incoming = connection.receive(codec.encode(codec.Forward("0.0.0.0", 0, 2, 4)), BACKBONE, T0 + 0.03)
    assert incoming.forwards == [] and connection.stats["redelivery notices"] == 1
    assert tracker.next_deadline() == T0 + 0.03 + 0.02 + 3 / 1_000_000
    stranger = connection.receive(codec.encode(codec.Forward("0.0.0.0", 0, 2, 4)), ("127.0.0.1", 9), T0 + 0.04)
    assert stranger.forwards == [] and connection.stats["redelivery notices"] == 1  # only the backbone's counts


def lossy_network(redelivering: bool) -> tuple[MemoryNetwork, list[float]]:
    """A subscriber whose first DELIVER of sequence 2 and first re-DELIVER of it are lost; when it REQUESTs."""
    net = MemoryNetwork(step=0.001)
    sub = net.client(1001, redelivering=redelivering, journal=False)
    pub = net.client(1002, subscribe=False)
    lost = {"deliver": 1, "redeliver": 1}
    asked: list[float] = []

    def drop(datagram: bytes, source, destination) -> bool:
        if destination == BACKBONE and datagram[0] == codec.REQUEST:
            asked.append(net.now)
        if destination == sub.address and datagram[0] == codec.DELIVER and codec.decode(datagram)[0].seq == 2:
            kind = "deliver" if not asked else "redeliver"
            if lost[kind]:
                lost[kind] -= 1
                return True
        return False

    net.drop = drop
    net.run(0.05)
    for data in (b"1", b"2", b"3"):
        net.publish(pub, [data])
        net.tick()
    net.run(0.5)
    assert [m.seq for m in sub.messages] == [1, 2, 3]
    return net, asked


def test_a_hole_the_backbone_answers_itself_is_asked_again_promptly_end_to_end():
    _, asked = lossy_network(redelivering=True)
    assert len(asked) == 2 and asked[1] - asked[0] < 0.05  # the notice, then 20 ms


def test_a_client_without_the_flag_backs_off_as_before():
    _, asked = lossy_network(redelivering=False)
    assert len(asked) == 2 and asked[1] - asked[0] >= 0.1


def test_each_filled_hole_counts_its_time_from_noticed_to_filled_and_a_given_up_one_does_not():
    tracker = SequenceTracker(1, give_up_after=1.0)
    tracker.deliver(1, b"a", T0)
    tracker.deliver(5, b"e", T0 + 0.001)  # 2..4 noticed
    tracker.deliver(3, b"c", T0 + 0.010)  # split: 2 and 4
    tracker.deliver(2, b"b", T0 + 0.020)
    tracker.deliver(4, b"d", T0 + 0.031)
    assert [round(s, 6) for s in tracker.recoveries] == [0.019, 0.03]
    tracker.deliver(9, b"i", T0 + 0.1)
    tracker.handle_timers(T0 + 2)  # 6..8 given up
    assert len(tracker.recoveries) == 2 and tracker.lost == 3


def test_a_burst_lost_at_a_million_messages_a_second_is_filled_within_50_ms_of_being_noticed():
    """Protocol time on the in-memory network (1 ms steps): 1,000 messages a step, 20 ms of them lost."""
    net = MemoryNetwork(step=0.001)
    sub = net.client(1001, redelivering=True, journal=False)
    pub = net.client(1002, subscribe=False)
    net.run(0.05)
    losing = {"on": False}
    net.drop = lambda datagram, source, destination: (
        losing["on"] and destination == sub.address and datagram[0] == codec.DELIVER)
    payloads = [bytes(64)] * 1000
    for step in range(200):
        losing["on"] = 50 <= step < 70  # 20,000 messages never reach the subscriber
        net.publish(pub, payloads)
        net.tick()
    net.run(0.2)
    assert [m.seq for m in sub.messages] == list(range(1, 200_001)) and not sub.lost
    recoveries = list(sub.connection.tracker.recoveries)
    assert recoveries and max(recoveries) <= 0.05, recoveries
    assert sub.connection.stats["redelivery notices"] >= 1
