"""Whole datagrams kept whole behind a hole (SequenceTracker.buffer_run, the journal's recording path)."""
from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from fyrehose.protocol import codec
from fyrehose.protocol.connection import BackboneConnection, ConnectionOptions, DeliverForm
from fyrehose.protocol.frame_run import FrameRun
from fyrehose.protocol.tracker import Lost, Message, SequenceTracker

BACKBONE = ("127.0.0.1", 2323)


def datagram(first, count):
    return b"".join(codec.encode_deliver(seq, b"p%06d" % seq) for seq in range(first, first + count))


def flatten(events):
    out = []
    for event in events:
        if isinstance(event, FrameRun):
            out += [(seq, data) for seq, data in event.messages()]
        elif isinstance(event, Message):
            out.append((event.seq, event.data))
        else:
            out += [(seq, None) for seq in range(event.from_seq, event.to_seq + 1)]
    return out


@given(st.lists(st.integers(1, 40), min_size=1, max_size=30), st.data())
def test_every_sequence_comes_out_once_in_order_whatever_is_dropped_and_re_sent(sizes, data):
    """Datagrams in order, some dropped; the dropped ones re-sent later one message at a time (as the backbone's
    recent log or a journal does); what comes out is exactly the stream, datagrams that waited coming out whole."""
    options = ConnectionOptions(flags=0, delivers=DeliverForm.UNIFORM_RUNS, buffer_runs=True)
    connection = BackboneConnection(BACKBONE, options)
    connection.track()
    datagrams, first = [], 1
    for size in sizes:
        datagrams.append((first, size))
        first += size
    dropped = [d for d in datagrams[1:] if data.draw(st.booleans())]  # the first one starts the stream
    out, now = [], 0.0
    for first, size in datagrams:
        if (first, size) in dropped:
            continue
        incoming = connection.receive(datagram(first, size), BACKBONE, now)
        out += flatten(incoming.runs) + flatten(incoming.events)
    for first, size in dropped:  # re-delivered in pieces, from the backbone
        for seq in range(first, first + size):
            incoming = connection.receive(datagram(seq, 1), BACKBONE, now)
            out += flatten(incoming.runs) + flatten(incoming.events)
    total = sum(sizes)
    assert out == [(seq, b"p%06d" % seq) for seq in range(1, total + 1)]
    assert connection.stats["delivered frames"] >= total


def test_a_datagram_beyond_a_hole_waits_whole_and_a_give_up_releases_it():
    tracker = SequenceTracker(give_up_after=5.0)
    assert tracker.advance(1, 10)
    late = FrameRun(21, 10, 16, datagram(21, 10))
    assert tracker.buffer_run(late, now=0.0) == []  # 11..20 missing: a hole, the datagram waits
    assert tracker.holes == [(11, 20)]
    after = FrameRun(31, 5, 16, datagram(31, 5))
    assert tracker.buffer_run(after, now=0.0) == []
    assert tracker.buffer_run(FrameRun(25, 3, 16, datagram(25, 3)), now=0.0) is None  # not beyond the highest
    _, events = tracker.handle_timers(10.0)
    assert events == [Lost(11, 20, "not recovered"), late, after]  # the same objects, whole
    assert tracker.next == 36


def test_the_buffer_bound_counts_the_messages_of_waiting_datagrams():
    tracker = SequenceTracker(max_buffered=15)
    assert tracker.advance(1, 10)
    assert tracker.buffer_run(FrameRun(21, 10, 16, datagram(21, 10)), now=0.0) == []
    events = tracker.buffer_run(FrameRun(31, 10, 16, datagram(31, 10)), now=0.0)
    assert [type(e).__name__ for e in events] == ["Lost", "FrameRun", "FrameRun"]
    assert tracker.next == 41
