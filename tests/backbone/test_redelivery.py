"""Last-resort re-delivery: whole held datagrams, paced per requester in datagrams and bytes, and its notice."""
from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from fyrehose.backbone.core import Backbone
from fyrehose.backbone.pushes import LogEntry
from fyrehose.backbone.recent_log import RecentLog
from fyrehose.backbone.redelivery import Pacer, Redeliveries
from fyrehose.protocol import codec
from fyrehose.protocol.codec import Forward

T0 = 1000.0
A = ("127.0.0.1", 5001)
B = ("127.0.0.1", 5002)
PUB = ("127.0.0.1", 6000)


def held_log(sizes: list[int]) -> tuple[RecentLog, list[bytes]]:
    """A log of datagrams of ``sizes`` one-byte frames each, numbered from 1; and those datagrams."""
    log = RecentLog(1 << 20)
    datagrams = []
    seq = 1
    for size in sizes:
        datagram = b"".join(codec.encode_deliver(seq + i, bytes([i % 256])) for i in range(size))
        datagrams.append(datagram)
        log.add([LogEntry(memoryview(datagram), size, 10)])
        seq += size
    return log, datagrams


@settings(deadline=None)  # a loaded host may take longer than the default 200 ms
@given(st.lists(st.integers(1, 20), min_size=1, max_size=30), st.data())
def test_a_batch_requester_gets_every_held_datagram_it_asked_for_once_identical_and_in_order(sizes, data):
    log, datagrams = held_log(sizes)
    last = sum(sizes)
    lo = data.draw(st.integers(1, last))
    hi = data.draw(st.integers(lo, last))
    queue = Redeliveries(datagram_rate=data.draw(st.sampled_from([10.0, 1000.0])),
                         byte_rate=data.draw(st.sampled_from([100.0, 1e6])), datagram_burst=2, byte_burst=50)
    assert queue.add(A, lo, hi, T0)
    sent = []
    now = T0
    for _ in range(2000):
        sent += queue.take(now, log, lambda _: True)
        if not queue:
            break
        now = queue.next_deadline(now)
    assert not queue and queue.next_deadline(now) is None
    wanted = [d for d in datagrams if codec.decode(d)[0].seq <= hi and lo <= codec.decode(d)[-1].seq]
    assert [d for d, _ in sent] == wanted and {to for _, to in sent} == {A}


@settings(deadline=None)  # a loaded host may take longer than the default 200 ms
@given(st.floats(1.0, 1e4), st.floats(10.0, 1e6), st.integers(1, 8), st.integers(1, 200),
       st.lists(st.floats(0.0, 0.05), min_size=1, max_size=60))
def test_pacing_never_exceeds_burst_plus_rate_in_datagrams_nor_in_bytes_beyond_one_datagram(
        datagram_rate, byte_rate, datagram_burst, byte_burst, steps):
    log, _ = held_log([3] * 200)
    queue = Redeliveries(datagram_rate=datagram_rate, byte_rate=byte_rate, datagram_burst=datagram_burst,
                         byte_burst=byte_burst)
    queue.add(A, 1, 600, T0)
    now = T0
    count = size = 0
    for step in steps:
        now += step
        out = queue.take(now, log, lambda _: True)
        count += len(out)
        size += sum(len(d) for d, _ in out)
        elapsed = now - T0
        assert count <= datagram_burst + elapsed * datagram_rate + 1e-6
        assert size <= byte_burst + elapsed * byte_rate + 30 + 1e-6  # the last datagram may overdraw


def test_pacing_is_per_requester_and_limits_the_datagrams_of_one_tick():
    log, _ = held_log([5] * 100)
    queue = Redeliveries(datagram_rate=100.0, datagram_burst=4)
    queue.add(A, 1, 500, T0)
    queue.add(B, 1, 500, T0)
    out = queue.take(T0, log, lambda _: True)
    assert [to for _, to in out].count(A) == 4 and [to for _, to in out].count(B) == 4
    assert queue.take(T0, log, lambda _: True) == []  # same tick: both budgets spent
    assert queue.next_deadline(T0) == T0 + 0.01
    assert len(queue.take(T0 + 0.01, log, lambda _: True)) == 2  # one each


def test_a_plain_requester_gets_the_ranges_frames_one_per_datagram():
    log, _ = held_log([5, 5])
    queue = Redeliveries()
    queue.add(A, 3, 7, T0)
    out = queue.take(T0, log, lambda _: False)
    assert [codec.decode(d) for d, _ in out] == [[codec.Deliver(s, bytes([(s - 1) % 5]))] for s in range(3, 8)]


def test_a_range_queued_already_is_not_queued_twice_and_a_gone_subscriber_loses_its_ranges():
    log, _ = held_log([5] * 4)
    queue = Redeliveries(max_jobs=2)
    assert queue.add(A, 1, 20, T0) and queue.add(A, 5, 10, T0) and len(queue) == 1
    assert queue.add(B, 1, 2, T0) and not queue.add(B, 3, 4, T0)  # full
    assert queue.take(T0, log, lambda who: None if who == A else True) == [(log.datagram(1).data, B)]
    assert not queue


def test_pacer_lets_one_large_datagram_through_and_then_waits_for_the_byte_budget():
    pacer = Pacer(T0, datagram_rate=1e6, byte_rate=1000.0, datagram_burst=10, byte_burst=100)
    assert pacer.ready(T0)
    pacer.take(1100)
    assert not pacer.ready(T0) and pacer.wait(T0) == 1.001
    assert pacer.ready(T0 + 1.001)


# ---------------------------------------------------------------- through the core


def keepalive(bb: Backbone, source, now: float, flags: int) -> None:
    bb.receive(codec.encode(codec.Keepalive(flags=flags, token=bytes(16))), source, now)


def test_the_backbone_tells_a_client_that_understands_it_that_it_answers_itself_before_answering():
    bb = Backbone(rng=random.Random(1))
    keepalive(bb, A, T0, codec.FLAG_NOJOURNAL | codec.FLAG_BATCH | codec.FLAG_REDELIVERING)
    bb.receive(b"".join(codec.encode_push(bytes([i])) for i in range(5)), PUB, T0)
    original = [d for d, to in bb.flush(T0).sends if to == A and d[0] == codec.DELIVER]
    bb.receive(codec.encode(codec.Request("0.0.0.0", 0, 2, 3)), A, T0 + 0.1)
    out = [bytes(d) for d, to in bb.flush(T0 + 0.1).sends if to == A]
    assert codec.decode(out[0]) == [Forward("0.0.0.0", 0, 2, 3)]
    assert out[1:] == [bytes(original[0])]  # the whole datagram, as it was sequenced


def test_a_client_following_the_original_protocol_never_gets_the_notice():
    bb = Backbone(rng=random.Random(1))
    keepalive(bb, A, T0, codec.FLAG_NOJOURNAL)
    for i in range(3):
        bb.receive(codec.encode_push(bytes([i])), PUB, T0)
    bb.flush(T0)
    bb.receive(codec.encode(codec.Request("0.0.0.0", 0, 1, 3)), A, T0 + 0.1)
    out = [bytes(d) for d, to in bb.flush(T0 + 0.1).sends if to == A]
    assert [codec.decode(d) for d in out] == [[codec.Deliver(s, bytes([s - 1]))] for s in (1, 2, 3)]
