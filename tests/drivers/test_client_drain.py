"""The client's receive thread drains its socket while the application iterates slowly.

Whole backbone datagrams wait in the subscription's bounded queue as they came and become
messages only when the reader reaches them; past the bound the surplus is a reported loss.
"""
from __future__ import annotations

import subprocess
import sys
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fyrehose import Client
from fyrehose.drivers import client as client_module
from fyrehose.drivers.subscription import Subscription
from fyrehose.errors import MessagesLost
from fyrehose.protocol import codec
from fyrehose.protocol.frame_run import FrameRun
from fyrehose.protocol.tracker import Lost, Message


def run_of(first: int, count: int, size: int = 4) -> FrameRun:
    data = b"".join(codec.encode_deliver(seq, seq.to_bytes(size, "big")) for seq in range(first, first + count))
    return FrameRun(first, count, codec.FRAME_HEADER + size, data)


def drain(subscription: Subscription) -> list:
    out = []
    while (event := subscription.get(timeout=0)) is not None:
        out.append(event)
    return out


def test_a_run_waits_whole_and_comes_out_as_its_messages_in_order():
    subscription = Subscription(on_loss="yield")
    subscription._offer_run(run_of(1, 3))
    subscription._offer_run(run_of(4, 2))
    assert subscription.queued == 2
    assert drain(subscription) == [Message(seq, seq.to_bytes(4, "big")) for seq in range(1, 6)]


@settings(deadline=None)  # a loaded host may take longer than the default 200 ms
@given(st.lists(st.integers(1, 12), min_size=1, max_size=30), st.integers(1, 40),
       st.lists(st.integers(0, 15), min_size=1, max_size=30))
def test_every_sequence_comes_out_once_as_a_message_or_in_a_loss_and_the_queue_stays_bounded(
        counts, bound, reads):
    subscription = Subscription(on_loss="yield", max_queued=bound)
    seq = 1
    out: list = []
    for count, read in zip(counts, reads * len(counts)):
        subscription._offer_run(run_of(seq, count))
        seq += count
        assert subscription._offered - subscription._taken <= bound + 1  # and the marker of a loss
        for _ in range(read):
            event = subscription.get(timeout=0)
            if event is None:
                break
            out.append(event)
    out += drain(subscription)
    seen = []
    for event in out:
        seen += range(event.from_seq, event.to_seq + 1) if isinstance(event, Lost) else [event.seq]
        assert not isinstance(event, Lost) or event.reason == "subscriber overrun"
    assert seen == list(range(1, seq))


def test_a_loss_past_the_bound_raises_after_what_was_queued():
    subscription = Subscription(max_queued=4)
    subscription._offer_run(run_of(1, 3))
    subscription._offer_run(run_of(4, 3))  # one fits, two do not
    assert [subscription.get(timeout=0).seq for _ in range(4)] == [1, 2, 3, 4]
    with pytest.raises(MessagesLost) as raised:
        subscription.get(timeout=0)
    assert raised.value.lost == Lost(5, 6, "subscriber overrun")


PUBLISHER = """
import sys, time
from fyrehose import Client
count, rate = int(sys.argv[2]), float(sys.argv[3])
with Client(sys.argv[1], subscribe=False) as pub:
    payloads = [i.to_bytes(8, "big") * 8 for i in range(count)]  # 64 bytes
    began = time.monotonic()
    for start in range(0, count, 1000):
        pub.publish_many(payloads[start:start + 1000], window=1000)
        time.sleep(max(0.0, began + (start + 1000) / rate - time.monotonic()))
"""


def test_a_reader_drains_the_socket_itself_so_a_burst_that_fits_is_taken_without_a_single_request(
        backbone_factory, monkeypatch):
    """The receive thread needs the interpreter for every datagram, and an application iterating in a tight loop
    holds it; so the reader reads the socket itself as it reaches each datagram (``Client._pump``).

    Shown without depending on who the scheduler runs when: the receive thread reads one datagram at a time until
    the burst's first one is queued for the reader, then no more; the whole burst waits in the kernel (it fits the
    socket buffer), and the reader must take every other datagram itself, in order, with no hole to REQUEST."""
    backbone = backbone_factory(workers=0)
    burst = 20_000
    monkeypatch.setattr(client_module, "RECEIVE_BUFFER", 4 << 20)
    reader = threading.current_thread()
    hold = threading.Event()  # set: the receive thread stops reading once a datagram of the burst is queued
    read_by = {"receive thread": 0, "reader": 0}
    original_handle, original_drain = Client._handle, Client._drain

    def handle(self, data, source, now, from_group):
        read_by["reader" if threading.current_thread() is reader else "receive thread"] += 1
        return original_handle(self, data, source, now, from_group)

    def drain(self, limit):
        if threading.current_thread() is not reader and hold.is_set():
            if stream._offered:
                return
            limit = 1
        original_drain(self, limit)

    with Client(backbone.addr) as sub:
        stream = sub.subscribe(max_queued=2 * burst)
        monkeypatch.setattr(Client, "_handle", handle)
        monkeypatch.setattr(Client, "_drain", drain)
        hold.set()
        publisher = subprocess.run([sys.executable, "-c", PUBLISHER, backbone.address, str(burst), "1000000000"],
                                   timeout=120)
        assert publisher.returncode == 0  # every message is sequenced and DELIVERed: in the socket buffer now
        seqs = []
        for _ in range(burst):
            message = stream.get(timeout=30)
            assert message is not None, f"the stream stalled after {len(seqs)} messages"
            seqs.append(message.seq)
        assert seqs == list(range(seqs[0], seqs[0] + burst))
        assert read_by["reader"] > 0, read_by  # and the receive thread read nothing after the first of the burst
        assert sub.stats["requests"] == 0 and sub.stats["lost"] == 0, dict(sub.stats)


def waiting(on_loss: str) -> Subscription:
    """A subscription holding runs 1-3 and 5-8 around message 4, then the loss of 9, then run 10-11."""
    subscription = Subscription(on_loss=on_loss)
    subscription._offer_run(run_of(1, 3))
    subscription._offer(Message(4, b"four"))
    subscription._offer_run(run_of(5, 4))
    subscription._offer(Lost(9, 9, "gave up"))
    subscription._offer_run(run_of(10, 2))
    return subscription


def test_get_many_takes_runs_in_bulk_up_to_its_limit_and_a_loss_starts_a_batch():
    subscription = waiting("raise")
    assert [event.seq for event in subscription.get_many(6, timeout=0)] == [1, 2, 3, 4, 5, 6]
    assert [event.seq for event in subscription.get_many(100, timeout=0)] == [7, 8]  # the loss ends the batch
    with pytest.raises(MessagesLost):  # and raises as get would, on_loss="raise"
        subscription.get_many(100, timeout=0)
    assert [event.seq for event in subscription.get_many(100, timeout=0)] == [10, 11]
    assert subscription.get_many(100, timeout=0) == []


def test_get_many_with_runs_hands_over_whole_datagrams_as_they_wait():
    subscription = waiting("yield")
    first = subscription.get_many(5, timeout=0, runs=True)  # the limit counts messages; a run comes whole
    assert first == [run_of(1, 3), Message(4, b"four"), run_of(5, 4)]
    assert subscription.get_many(100, timeout=0, runs=True) == [Lost(9, 9, "gave up")]
    assert subscription.get_many(100, timeout=0, runs=True) == [run_of(10, 2)]
    assert subscription.get_many(100, timeout=0, runs=True) == []
    assert subscription._taken == subscription._offered == 11  # counted as their messages: the bound holds
