"""The multi-process backbone's shared-memory plumbing: rings, doorbells, the shared structures, the records.

Rings are checked against a plain queue as the model (hypothesis drives
random interleavings of reserve/publish/read/release), then across a real
fork() with a doorbell, as the backbone uses them.
"""
from __future__ import annotations

import os
import signal
import threading
import time
from collections import Counter, deque

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fyrehose.backbone.intake import KeepaliveIn, RequestIn
from fyrehose.backbone.multiprocess import records
from fyrehose.backbone.multiprocess.rings import Doorbell, Ring
from fyrehose.backbone.multiprocess.shared import (
    COUNTER_NAMES,
    CounterBlock,
    SequencerState,
    SubscriberTable,
    Words,
    anonymous,
)


def make_ring(capacity: int, consumers: int = 1) -> tuple[Ring, memoryview]:
    size = Ring.region_size(capacity, consumers)
    region = memoryview(anonymous(size))[:size]
    return Ring(region, consumers), region


def payload(n: int, size: int) -> bytes:
    return bytes((n + i) & 0xFF for i in range(size))


def read_all(ring: Ring, consumer: int = 0) -> list[bytes]:
    spans, position = ring.read(consumer)
    out = [bytes(ring.data[offset:offset + length]) for offset, length, _ in spans]
    ring.release(consumer, position)
    return out


# ---------------------------------------------------------------- one producer, one consumer


operations = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.integers(0, 300)),
        st.tuples(st.just("publish"), st.just(0)),
        st.tuples(st.just("read"), st.integers(1, 8)),
    ),
    max_size=200,
)


@settings(max_examples=200, deadline=None)
@given(operations, st.sampled_from([1024, 1000, 4096]))
def test_ring_returns_every_published_record_once_in_order_with_its_bytes(ops, capacity):
    ring, _ = make_ring(capacity)
    published: deque[bytes] = deque()
    reserved: list[bytes] = []
    received: list[bytes] = []
    counter = 0
    for op, arg in ops:
        if op == "put":
            counter += 1
            data = payload(counter, arg)
            slot = ring.reserve(len(data))
            if slot is None:
                # refused only when unread records really take the room
                assert ring.backlog() > 0 or reserved
                continue
            slot[:] = data
            reserved.append(data)
        elif op == "publish":
            ring.publish()
            published.extend(reserved)
            reserved.clear()
        else:
            spans, _ = ring.read(0, arg)
            assert len(spans) == min(arg, len(published))
            for offset, length, after in spans:
                received.append(bytes(ring.data[offset:offset + length]))
                assert received[-1] == published.popleft()
                ring.release(0, after)
    ring.publish()
    published.extend(reserved)
    assert read_all(ring) == list(published)
    assert ring.backlog() == 0 and ring.fill() == 0.0


def test_full_ring_refuses_instead_of_overwriting_and_takes_records_again_after_release():
    ring, _ = make_ring(1024)
    stored = []
    for n in range(100):
        slot = ring.reserve(100)
        if slot is None:
            break
        slot[:] = payload(n, 100)
        stored.append(payload(n, 100))
    ring.publish()
    assert 0 < len(stored) < 100
    assert ring.fill() > 0.8
    assert ring.reserve(100) is None
    assert read_all(ring) == stored
    assert ring.reserve(100) is not None


def test_record_that_does_not_fit_at_the_end_starts_at_the_beginning_in_one_piece():
    ring, _ = make_ring(1024)
    for n in range(7):  # 7 records of 128 bytes (120 + header): 896 bytes, 128 left at the end
        ring.reserve(120)[:] = payload(n, 120)
    ring.publish()
    assert len(read_all(ring)) == 7
    ring.reserve(200)[:] = payload(99, 200)  # does not fit in the last 128 bytes
    ring.publish()
    spans, _ = ring.read()
    assert [(offset, length) for offset, length, _ in spans] == [(8, 200)]  # at the start, contiguous
    assert read_all(ring) == [payload(99, 200)]


def test_record_larger_than_half_the_ring_is_a_programming_error():
    ring, _ = make_ring(1024)
    with pytest.raises(ValueError):
        ring.reserve(600)


def test_unpublished_records_are_invisible_and_can_be_discarded():
    ring, _ = make_ring(1024)
    ring.reserve(10)[:] = b"0123456789"
    assert ring.read() == ([], 0)
    ring.discard()
    ring.reserve(3)[:] = b"abc"
    ring.publish()
    assert read_all(ring) == [b"abc"]


def test_a_new_ring_over_the_same_memory_continues_where_the_old_one_stopped():
    ring, region = make_ring(1024)
    for n in range(3):
        ring.reserve(50)[:] = payload(n, 50)
    ring.publish()
    spans, _ = ring.read()
    ring.release(0, spans[0][2])  # the consumer took one record, then "crashed"
    ring.reserve(50)[:] = b"x" * 50  # reserved, never published: the producer "crashed" too
    restarted = Ring(region)
    assert read_all(restarted) == [payload(1, 50), payload(2, 50)]
    restarted.reserve(5)[:] = b"after"
    restarted.publish()
    assert read_all(Ring(region)) == [b"after"]


# ---------------------------------------------------------------- one producer, several consumers


def test_log_ring_waits_for_the_slowest_consumer():
    ring, _ = make_ring(2048, consumers=3)
    written = []
    for n in range(100):
        slot = ring.reserve(64)
        if slot is None:
            break
        slot[:] = payload(n, 64)
        written.append(payload(n, 64))
    ring.publish()
    assert read_all(ring, 0) == written
    assert read_all(ring, 1) == written
    assert ring.reserve(64) is None, "consumer 2 has not read anything: nothing may be overwritten"
    assert read_all(ring, 2) == written
    assert ring.reserve(64) is not None


# ---------------------------------------------------------------- across processes


def voluntary_switches() -> int:
    """How often this thread gave up its CPU to wait (Linux counts it per thread)."""
    with open(f"/proc/self/task/{threading.get_native_id()}/status") as status:
        for line in status:
            if line.startswith("voluntary_ctxt_switches:"):
                return int(line.split()[1])
    raise AssertionError("no voluntary_ctxt_switches in /proc")


def test_ring_and_doorbell_across_fork_deliver_everything_in_order_and_the_reader_sleeps():
    ring, _ = make_ring(1 << 16)
    bell = Doorbell()
    start = Doorbell()
    total = 3000
    child = os.fork()
    if child == 0:  # the producer
        try:
            start.wait(10)
            for n in range(total):
                while True:
                    slot = ring.reserve(n % 200)
                    if slot is not None:
                        break
                    time.sleep(0.0005)  # the consumer makes room
                slot[:] = payload(n, n % 200)
                if n % 50 == 49 or n == total - 1:
                    ring.publish()
                    bell.ring()
        finally:
            os._exit(0)
    try:
        switches = voluntary_switches()
        assert not bell.wait(0.3)  # nothing published: the reader sleeps, it does not spin or poll
        assert 1 <= voluntary_switches() - switches <= 3  # it slept in the kernel once (spinning: 0, polling: many)
        start.ring()
        got = []
        deadline = time.monotonic() + 20
        while len(got) < total and time.monotonic() < deadline:
            bell.clear()
            records_now = read_all(ring)
            if not records_now:
                bell.wait(0.5)
                continue
            got.extend(records_now)
        assert got == [payload(n, n % 200) for n in range(total)]
    finally:
        os.kill(child, signal.SIGKILL)  # a child that already exited is a zombie until reaped: no error
        os.waitpid(child, 0)
        bell.close()
        start.close()


def test_doorbell_wakes_once_per_clear():
    bell = Doorbell()
    try:
        assert not bell.wait(0)
        bell.ring()
        bell.ring()
        assert bell.wait(0)
        bell.clear()
        assert not bell.wait(0)
    finally:
        bell.close()


# ---------------------------------------------------------------- shared structures


def test_counter_block_round_trips_and_folds_unknown_names_into_other():
    block = CounterBlock(memoryview(anonymous(CounterBlock.SIZE)))
    counters = Counter({name: i + 1 for i, name in enumerate(COUNTER_NAMES) if name != "drop:other"})
    block.store(counters)
    assert block.load() == counters
    block.store(Counter({"pushes": 5, "drop:something new": 2, "drop:another": 3}))
    loaded = block.load()
    assert loaded["pushes"] == 5 and loaded["drop:other"] == 5


@given(st.lists(st.tuples(st.tuples(st.ip_addresses(v=4).map(str), st.integers(0, 65535)),
                          st.integers(0, 0xFFFF)), max_size=40))
def test_subscriber_table_snapshot_returns_what_was_published(rows):
    table = SubscriberTable(memoryview(anonymous(SubscriberTable.region_size(64))), 64)
    before = table.version
    table.publish(records.pack_clients(rows))
    version, snapshot = table.snapshot()
    assert snapshot == rows
    assert version > before and version % 2 == 0


def test_subscriber_table_torn_by_a_dead_writer_reads_as_empty():
    region = memoryview(anonymous(SubscriberTable.region_size(8)))
    table = SubscriberTable(region, 8)
    table.publish(records.pack_clients([(("10.0.0.1", 1), 0)]))
    region.cast("Q")[0] += 1  # a writer died between "odd" and "even"
    assert table.snapshot(attempts=5)[1] == []
    table.publish(records.pack_clients([(("10.0.0.2", 2), 4)]))  # the next writer repairs it
    assert table.snapshot()[1] == [(("10.0.0.2", 2), 4)]


def test_sequencer_state_and_flags_are_shared_words():
    state = SequencerState(memoryview(anonymous(SequencerState.SIZE)))
    state.last_issued = (1 << 48) - 1
    state.store_gauges({"clients": 3, "journalers": 2, "multicast subscribers": 1})
    assert state.last_issued == (1 << 48) - 1
    assert state.gauges() == {"plain subscribers": 0, "batch subscribers": 0, "journalers": 2, "clients": 3,
                              "multicast subscribers": 1}
    words = Words(memoryview(anonymous(64)), 3)
    words[2] = True
    words[1] = 1 << 62
    assert [words[i] for i in range(3)] == [0, 1 << 62, 1]


# ---------------------------------------------------------------- records


addresses = st.tuples(st.ip_addresses(v=4).map(str), st.integers(0, 65535))


@given(addresses, addresses, st.integers(0, (1 << 48) - 1), st.binary(min_size=16, max_size=16),
       st.integers(0, 1 << 63))
def test_keepalive_record_round_trips(client, source, flags, token, arrival):
    record = records.pack_control(KeepaliveIn(client, flags, token), source, arrival)
    assert records.unpack_ingress(memoryview(record)) == (records.KEEPALIVE_RECORD, source,
                                                          KeepaliveIn(client, flags, token))
    assert records.arrival(memoryview(record)) == arrival


@given(addresses, addresses, st.integers(1, (1 << 48) - 1), st.integers(1, (1 << 48) - 1))
def test_request_record_round_trips(requester, source, low, high):
    record = records.pack_control(RequestIn(requester, low, high), source, 7)
    assert records.unpack_ingress(memoryview(record)) == (records.REQUEST_RECORD, source,
                                                          RequestIn(requester, low, high))


@given(addresses, st.binary(max_size=200))
def test_push_record_round_trips(source, frames):
    record = bytearray(records.push_record_size(len(frames)))
    records.pack_push_header(memoryview(record), source, 99)
    record[records.SOURCE_SIZE:] = frames
    kind, got_source, body = records.unpack_ingress(memoryview(record))
    assert (kind, got_source, bytes(body)) == (records.PUSH_RECORD, source, frames)


@given(st.lists(st.tuples(addresses, st.integers(0, 0xFFFF)), max_size=30))
def test_client_table_record_round_trips(rows):
    assert records.unpack_clients(records.pack_clients(rows)) == rows


def test_unknown_record_kind_is_refused():
    with pytest.raises(ValueError):
        records.unpack_ingress(memoryview(bytes(records.SOURCE_SIZE)))
