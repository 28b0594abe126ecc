"""Whole datagrams kept as runs: the in-memory journal that answers FORWARDs, and the connection that hands them over."""
from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from fyrehose.protocol import codec
from fyrehose.protocol.connection import BackboneConnection, ConnectionOptions, DeliverForm
from fyrehose.protocol.frame_run import FrameRun
from fyrehose.protocol.recent_messages import RecentMessages
from fyrehose.protocol.tracker import Message

BACKBONE = ("127.0.0.1", 2323)


def payload(seq: int, size: int = 8) -> bytes:
    return seq.to_bytes(size, "big")


def run_of(first: int, count: int, size: int = 8) -> FrameRun:
    data = b"".join(codec.encode_deliver(seq, payload(seq, size)) for seq in range(first, first + count))
    return FrameRun(first, count, codec.FRAME_HEADER + size, data)


# a journal's history: whole runs and single messages, over sequences 1..120
additions = st.lists(st.one_of(
    st.tuples(st.just("run"), st.integers(1, 100), st.integers(1, 20)),
    st.tuples(st.just("one"), st.integers(1, 120), st.just(1)),
), max_size=30)


@given(additions, st.integers(1, 120), st.integers(0, 40))
def test_runs_and_single_messages_are_found_alike(history, low, width):
    journal = RecentMessages(1 << 20)
    held: set[int] = set()
    run_firsts: list[int] = []  # runs kept whole
    # what the journal counts: each message once, but one kept alone strictly inside a run kept whole after it
    # twice (RecentMessages.add_run says so)
    entries = 0
    for kind, first, count in history:
        last = first + count - 1
        if kind == "run":
            journal.add_run(run_of(first, count))
            if first in held or last in held or any(first <= start <= last for start in run_firsts):
                entries += len(set(range(first, last + 1)) - held)  # kept message by message
            else:
                entries += count
                run_firsts.append(first)
        else:
            journal.add(first, payload(first))
            if first not in held:
                entries += 1
        held.update(range(first, last + 1))
    assert len(journal) == entries
    assert all(journal.get(seq) == payload(seq) and seq in journal for seq in held)
    assert all(journal.get(seq) is None for seq in range(1, 130) if seq not in held)
    high = low + width
    expected = [(seq, payload(seq)) for seq in sorted(held) if low <= seq <= high]
    assert list(journal.held(low, high)) == expected
    assert list(journal.held(1, 1 << 40)) == [(seq, payload(seq)) for seq in sorted(held)]  # the sparse path


def test_the_oldest_entries_go_first_whole_runs_at_once():
    run = run_of(1, 10)
    journal = RecentMessages(2 * len(run.data))
    journal.add_run(run)
    journal.add_run(run_of(11, 10))
    assert len(journal) == 20 and journal.bytes == 2 * len(run.data)
    journal.add(21, payload(21))  # over the bound: the first run goes whole
    assert len(journal) == 11 and journal.get(10) is None and journal.get(11) == payload(11)
    assert journal.get(21) == payload(21)
    journal.add_run(run_of(22, 30))  # larger than the whole journal: not kept
    assert journal.get(22) is None and len(journal) == 11


def test_a_run_overlapping_what_is_kept_at_its_ends_is_kept_message_by_message():
    journal = RecentMessages(1 << 20)
    journal.add(1, payload(1))
    journal.add_run(run_of(1, 10))
    assert list(journal.held(1, 10)) == [(seq, payload(seq)) for seq in range(1, 11)]
    assert len(journal) == 10


def datagram(first: int, count: int, size: int = 8) -> bytes:
    return codec.pack([codec.Deliver(seq, payload(seq, size)) for seq in range(first, first + count)])


def release_and_store_as_message_by_message(arrivals, frames_of, delivers=DeliverForm.UNIFORM_RUNS) -> None:
    """Datagrams in any order, overlapping: a connection keeping them whole (``delivers``) releases and
    stores exactly what one taking them message by message does."""
    whole = BackboneConnection(BACKBONE, ConnectionOptions(flags=codec.FLAG_BATCH, delivers=delivers))
    single = BackboneConnection(BACKBONE, ConnectionOptions(flags=codec.FLAG_BATCH))
    whole.track(1)
    single.track(1)
    released_whole, released_single = [], []
    stored_whole, stored_single = RecentMessages(1 << 20), RecentMessages(1 << 20)
    for first, count in arrivals:
        data = codec.pack([codec.Deliver(seq, frames_of(seq)) for seq in range(first, first + count)])
        incoming = whole.receive(data, BACKBONE, 0.0)
        stored_whole.add_many(incoming.stored)
        released_whole += [event for event in incoming.events if isinstance(event, Message)]
        for run in incoming.runs:
            stored_whole.add_run(run)
            released_whole += [Message(seq, data) for seq, data in run.messages()]
            assert run.payloads() == [data for _, data in run.messages()]
        incoming = single.receive(data, BACKBONE, 0.0)
        assert not incoming.runs
        stored_single.add_many(incoming.stored)
        released_single += [event for event in incoming.events if isinstance(event, Message)]
    assert released_whole == released_single
    assert len(stored_whole) == len(stored_single) == len({seq for seq, _ in stored_single.held(1, 100)})
    assert list(stored_whole.held(1, 100)) == list(stored_single.held(1, 100))
    assert all(stored_whole.get(seq) == data for seq, data in stored_single.held(1, 100))
    assert whole.tracker.next == single.tracker.next and whole.tracker.holes == single.tracker.holes


arrivals = st.lists(st.tuples(st.integers(1, 60), st.integers(1, 12)), min_size=1, max_size=25)


@given(arrivals)
def test_whole_datagrams_release_and_store_what_message_by_message_does(arrivals):
    """As runs when they continue the stream, else as messages."""
    release_and_store_as_message_by_message(arrivals, lambda seq: payload(seq, 8))


def test_a_peers_redelivery_is_never_taken_as_a_whole_run():
    options = ConnectionOptions(flags=codec.FLAG_BATCH, delivers=DeliverForm.UNIFORM_RUNS)
    connection = BackboneConnection(BACKBONE, options)
    connection.track(1)
    assert connection.receive(datagram(1, 5), BACKBONE, 0.0).runs == [run_of(1, 5)]
    incoming = connection.receive(datagram(6, 5), ("127.0.0.1", 9999), 0.0)  # a stranger's: nothing asked
    assert not incoming.runs and not incoming.stored and connection.stats["DELIVERs from strangers"] == 5


def varied(seq: int) -> bytes:
    return payload(seq, 1 + seq % 5)  # frames of several sizes in one datagram


@given(arrivals)
def test_datagrams_of_varied_frame_sizes_go_out_whole_as_message_by_message_does(arrivals):
    """With ANY_RUNS a datagram of frames of several sizes that continues the stream is a run (step 0)."""
    release_and_store_as_message_by_message(arrivals, varied, DeliverForm.ANY_RUNS)


def test_a_datagram_of_varied_frame_sizes_is_one_run_only_when_asked_for():
    data = codec.pack([codec.Deliver(seq, varied(seq)) for seq in range(1, 6)])
    asked = BackboneConnection(BACKBONE, ConnectionOptions(flags=codec.FLAG_BATCH, delivers=DeliverForm.ANY_RUNS))
    plain = BackboneConnection(BACKBONE, ConnectionOptions(flags=codec.FLAG_BATCH, delivers=DeliverForm.UNIFORM_RUNS))
    asked.track(1)
    plain.track(1)
    run, = asked.receive(data, BACKBONE, 0.0).runs
    assert (run.first, run.count, run.step) == (1, 5, 0) and list(run.messages()) == [
        (seq, varied(seq)) for seq in range(1, 6)]
    incoming = plain.receive(data, BACKBONE, 0.0)  # the journal's and the load test's: uniform runs only
    assert not incoming.runs and [event.seq for event in incoming.events] == [1, 2, 3, 4, 5]
