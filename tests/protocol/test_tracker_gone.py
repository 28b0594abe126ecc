"""GONE at the subscriber: numbers the backbone says nobody will deliver are reported at once, in order, as lost
(or as never sent), and what was asked for around them still waits."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from fyrehose.protocol import codec
from fyrehose.protocol.connection import BackboneConnection, ConnectionOptions
from fyrehose.protocol.tracker import GONE_LOST, GONE_NEVER_SENT, NOT_RECOVERED, Lost, Message, SequenceTracker

BACKBONE = ("10.0.0.100", 2323)


def test_a_gone_range_at_the_front_is_reported_at_once_and_the_stream_goes_on():
    tracker = SequenceTracker(1)
    tracker.deliver(1, b"a", 0.0)
    tracker.deliver(20, b"t", 0.0)
    events = tracker.gone(2, 19, True, 0.1)
    assert events == [Lost(2, 19, GONE_NEVER_SENT), Message(20, b"t")]
    assert tracker.never_sent == 18 and tracker.lost == 0


def test_a_gone_range_behind_an_open_hole_waits_for_it_and_the_rest_is_still_asked_for():
    tracker = SequenceTracker(1)
    tracker.deliver(1, b"a", 0.0)
    tracker.deliver(30, b"z", 0.0)
    assert tracker.gone(10, 19, False, 0.1) == []  # 2..9 may still come
    requests, _ = tracker.handle_timers(0.2)
    assert requests == [(2, 9), (20, 29)]  # never the gone part
    events = [e for seq in range(2, 10) for e in tracker.deliver(seq, b"r", 0.3)]
    events += tracker.handle_timers(0.3)[1]
    assert events[-2:] == [Message(9, b"r"), Lost(10, 19, GONE_LOST)]
    assert tracker.holes == [(20, 29)] and tracker.lost == 10


def test_only_the_backbone_may_say_gone_and_a_forged_frame_is_counted():
    connection = BackboneConnection(BACKBONE, ConnectionOptions(flags=codec.FLAG_BATCH))
    connection.track(1)
    connection.receive(codec.encode_deliver(5, b"e"), BACKBONE, 0.0)
    stranger = connection.receive(codec.encode_gone(1, 4, codec.GONE_LOST), ("10.0.0.9", 2323), 0.1)
    assert stranger.events == [] and connection.stats["GONE from strangers"] == 1
    assert connection.receive(b"\x80\x00", BACKBONE, 0.1).events == [] and connection.stats["malformed"] == 1
    incoming = connection.receive(codec.encode_gone(1, 4, codec.GONE_LOST), BACKBONE, 0.2)
    assert incoming.events == [Lost(1, 4, GONE_LOST), Message(5, b"e")]


@settings(max_examples=300, deadline=None)
@given(st.sets(st.integers(1, 60), max_size=40), st.lists(st.tuples(st.integers(1, 60), st.integers(0, 10),
                                                                     st.booleans()), max_size=5))
def test_every_number_comes_out_once_whatever_is_delivered_and_declared_gone(delivered, gones):
    tracker = SequenceTracker(1, give_up_after=100.0)
    events = []
    for seq in sorted(delivered) + [61]:
        events += tracker.deliver(seq, b"%d" % seq, 0.0)
    for first, span, never in gones:
        events += tracker.gone(first, min(60, first + span), never, 1.0)
    events += tracker.handle_timers(1000.0)[1]
    numbers = []
    for event in events:
        if isinstance(event, Message):
            numbers.append(event.seq)
            assert event.seq in delivered or event.seq == 61
        else:
            numbers += range(event.from_seq, event.to_seq + 1)
            assert event.reason in (GONE_LOST, GONE_NEVER_SENT, NOT_RECOVERED)
    assert numbers == list(range(1, 62))
