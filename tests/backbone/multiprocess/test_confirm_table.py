"""The shared-memory table of confirmed tags: the pure table, and exactly once across a sequencer kill -9."""
from __future__ import annotations

import socket
import time
from collections import defaultdict

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fyrehose import Client
from fyrehose.backbone.confirms import ConfirmCache
from fyrehose.backbone.multiprocess.confirm_table import SharedConfirmTable
from fyrehose.protocol import codec
from fyrehose.protocol.tracker import Lost, Message

from support import EVENT_WITHIN, wait_until, workers_of

SOURCES = [("127.0.0.1", 4000), ("127.0.0.1", 4001), ("10.1.2.3", 4000)]


def table(slots: int = 1024, max_age: float = 30.0, region: memoryview | None = None) -> SharedConfirmTable:
    region = region if region is not None else memoryview(bytearray(SharedConfirmTable.region_size(slots)))
    return SharedConfirmTable(region, time.monotonic(), slots, max_age, margin=MARGIN)


MARGIN = 8


def remember(confirmed: ConfirmCache | SharedConfirmTable, source, pairs, now: float) -> None:
    """(tag, sequence) pairs of one datagram from ``source``, as the backbone hands them over: as runs."""
    confirmed.remember_runs(source, codec.pair_runs(pairs), now)


@given(st.lists(st.tuples(st.sampled_from(SOURCES), st.integers(1, codec.MAX_TAG), st.integers(1, 1 << 48)),
                max_size=60))
def test_what_was_just_remembered_is_found_and_the_latest_wins(operations):
    confirmed = table()
    for now, (source, tag, seq) in enumerate(operations):
        remember(confirmed, source, [(tag, seq)], float(now))
        assert confirmed.lookup(source, tag) == seq
    assert confirmed.lookup(("192.0.2.1", 1), 1) is None


@given(st.lists(st.tuples(st.sampled_from(SOURCES), st.integers(1, codec.MAX_TAG)), min_size=1, max_size=200,
                unique=True),
       st.integers(1, MARGIN))
def test_a_restarted_table_answers_what_the_ring_still_holds_after_wrapping(entries, per_datagram):
    slots = 64
    region = memoryview(bytearray(SharedConfirmTable.region_size(slots)))
    first = table(slots, region=region)
    now = time.monotonic()
    for index in range(0, len(entries), per_datagram):
        for source, tag in entries[index:index + per_datagram]:
            remember(first, source, [(tag, 1000 + entries.index((source, tag)))], now)
    restarted = table(slots, region=region)
    kept = entries[-(slots - MARGIN):]
    assert all(restarted.lookup(source, tag) == 1000 + entries.index((source, tag)) for source, tag in kept)
    assert all(restarted.lookup(source, tag) is None for source, tag in entries[:-(slots - MARGIN)])
    assert len(restarted) == len(kept)


def test_expired_records_are_not_replayed():
    region = memoryview(bytearray(SharedConfirmTable.region_size(64)))
    first = table(64, max_age=10.0, region=region)
    remember(first, SOURCES[0], [(1, 11)], time.monotonic() - 60)
    remember(first, SOURCES[1], [(2, 22)], time.monotonic())
    restarted = table(64, max_age=10.0, region=region)
    assert restarted.lookup(SOURCES[0], 1) is None
    assert restarted.lookup(SOURCES[1], 2) == 22


def test_records_past_the_head_are_never_replayed():
    region = memoryview(bytearray(SharedConfirmTable.region_size(64)))
    first = table(64, region=region)
    remember(first, SOURCES[2], [(7, 70), (8, 80)], time.monotonic())
    head = region.cast("Q")[0]
    remember(first, SOURCES[2], [(9, 90)], time.monotonic())
    region.cast("Q")[0] = head  # a writer killed after copying the record, before moving the head
    restarted = table(64, region=region)
    assert (restarted.lookup(SOURCES[2], 7), restarted.lookup(SOURCES[2], 8)) == (70, 80)
    assert restarted.lookup(SOURCES[2], 9) is None


def test_tags_of_numbers_never_published_are_not_replayed():
    region = memoryview(bytearray(SharedConfirmTable.region_size(64)))
    first = table(64, region=region)
    remember(first, SOURCES[0], [(1, 10), (2, 11)], time.monotonic())
    remember(first, SOURCES[0], [(3, 12), (4, 13)], time.monotonic())  # sequenced, then killed before publishing
    restarted = SharedConfirmTable(region, time.monotonic(), 64, margin=4, published=11)
    assert [restarted.lookup(SOURCES[0], tag) for tag in (1, 2, 3, 4)] == [10, 11, None, None]


def test_a_batch_is_one_record_and_a_restart_keeps_only_its_published_part():
    region = memoryview(bytearray(SharedConfirmTable.region_size(64)))
    first = table(64, region=region)
    first.remember_runs(SOURCES[0], [(1000, 500, 1)], time.monotonic())  # one record for 500 tags
    first.remember_runs(SOURCES[1], [(7, 10, 501)], time.monotonic())
    assert first.lookup(SOURCES[0], 1499) == 500
    restarted = SharedConfirmTable(region, time.monotonic(), 64, margin=4, published=505)  # 501..505 were published, not 506..
    assert [restarted.lookup(SOURCES[0], tag) for tag in (1000, 1499)] == [1, 500]
    assert [restarted.lookup(SOURCES[1], tag) for tag in (7, 11, 12)] == [501, 505, None]


def test_a_datagram_cannot_outgrow_the_margin():
    with pytest.raises(ValueError):
        remember(table(64), SOURCES[0], [(2 * tag, tag) for tag in range(1, MARGIN + 2)], 0.0)  # a run each


def _confirms(sock: socket.socket, seen: dict[int, set[int]], wait: float) -> None:
    deadline = time.monotonic() + wait
    while (left := deadline - time.monotonic()) > 0:
        sock.settimeout(left)
        try:
            data = sock.recv(65536)
        except TimeoutError:
            return
        if data[:1] == bytes((codec.CONFIRM,)):
            for frame in codec.decode(data):
                seen[frame.tag].add(frame.seq)


def test_a_retried_push_is_never_sequenced_twice_across_a_sequencer_kill_9(backbone_factory):
    backbone = backbone_factory(workers=2)
    wait_until(lambda: "fh-sequencer" in workers_of(backbone))
    victim = workers_of(backbone)["fh-sequencer"]
    seen: dict[int, set[int]] = defaultdict(set)
    # What was delivered, not only what was confirmed: a tag sequenced before the kill whose CONFIRM was lost,
    # then sequenced again, reaches subscribers under two numbers. The keeper answers the subscriber's REQUESTs.
    with Client(backbone.addr) as keeper, Client(backbone.addr, give_up_after=3.0) as subscriber, \
            socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as publisher:
        keeper.subscribe(from_seq=1)
        stream = subscriber.subscribe(from_seq=1, on_loss="yield")  # before the first PUSH: every sequence
        publisher.bind(("127.0.0.1", 0))

        def push(tags: range) -> None:
            frames = [codec.encode_push(b"tagged %d" % tag, tag) for tag in tags]  # one payload per tag
            for datagram in codec.pack_greedy(frames):
                publisher.sendto(datagram, backbone.addr)

        for batch in range(20):  # load: 20 packed datagrams of 200 tagged PUSHes, CONFIRMs read as they come
            push(range(batch * 200 + 1, batch * 200 + 201))
            _confirms(publisher, seen, 0.02)
            if batch == 10:
                victim.kill()  # mid-stream: some tags sequenced and confirmed, some in flight, some not yet sent
        wait_until(lambda: getattr(workers_of(backbone).get("fh-sequencer"), "pid", victim.pid) != victim.pid, EVENT_WITHIN)
        # every tag retried until confirmed, as a publisher whose CONFIRMs were lost would (a loaded host may take
        # many rounds to bring the new sequencer up: bounded by the event bound, and by a count)
        retrying_until = time.monotonic() + EVENT_WITHIN
        for _ in range(int(EVENT_WITHIN / 0.5)):
            push(range(1, 4001))
            _confirms(publisher, seen, 0.5)
            if len(seen) == 4000 or time.monotonic() > retrying_until:
                break
        last = max((seq for seqs in seen.values() for seq in seqs), default=0)
        delivered: dict[bytes, list[int]] = defaultdict(list)
        lost: list[Lost] = []
        position = 0
        deadline = time.monotonic() + EVENT_WITHIN  # a hole nobody holds is reported after give_up_after
        while position < last and time.monotonic() < deadline:
            event = stream.get(timeout=0.2)
            if isinstance(event, Message):
                delivered[event.data].append(event.seq)
                position = event.seq
            elif isinstance(event, Lost):
                lost.append(event)
                position = event.to_seq
    assert len(seen) == 4000, "some tags were never confirmed"
    twice = {tag: seqs for tag, seqs in seen.items() if len(seqs) > 1}
    assert not twice, f"tags sequenced twice: {dict(list(twice.items())[:5])}"
    seqs = [next(iter(s)) for s in seen.values()]
    assert len(set(seqs)) == len(seqs), "two tags share a sequence"
    assert position >= last, f"the subscriber reached sequence {position} of {last} within 20 s"
    assert set(delivered) <= {b"tagged %d" % tag for tag in seen}
    wrong = {tag: (confirmed, delivered[b"tagged %d" % tag]) for tag, (confirmed,) in seen.items()
             if delivered[b"tagged %d" % tag] != [confirmed]}
    assert not wrong, (f"{len(wrong)} tags not delivered exactly once under their CONFIRMed sequence "
                       f"(tag: (confirmed, delivered)): {dict(list(wrong.items())[:5])}; lost: {lost[:5]}")
    assert backbone.metric('fyrehose_worker_restarts_total{worker="sequencer"}') == 1


# ---------------------------------------------------------------- the heap cache both backbones use


def test_the_cache_forgets_whole_datagrams_oldest_first_by_count_of_runs_and_by_age():
    cache = ConfirmCache(capacity=3, max_age=10.0)
    remember(cache, SOURCES[0], [(1, 11), (2, 12), (3, 13)], 0.0)  # a batch: one run
    remember(cache, SOURCES[1], [(1, 21), (3, 22)], 1.0)  # two runs
    assert len(cache) == 5 and cache.known(SOURCES[0], [9, 3]) and not cache.known(SOURCES[0], [4, 5])
    assert cache.known(SOURCES[1], range(2, 4)) and not cache.known(SOURCES[1], range(4, 100))
    remember(cache, SOURCES[0], [(4, 14)], 2.0)  # over capacity: the oldest datagram goes whole
    assert [cache.lookup(SOURCES[0], tag) for tag in (1, 2, 3, 4)] == [None, None, None, 14]
    assert [cache.lookup(SOURCES[1], tag) for tag in (1, 2, 3)] == [21, None, 22]
    remember(cache, SOURCES[2], [(5, 35)], 11.5)  # 10 s after the second datagram: it expired
    assert cache.lookup(SOURCES[1], 1) is None and cache.lookup(SOURCES[0], 4) == 14
    assert not cache.known(SOURCES[1], [1, 2, 3])


def test_a_batch_of_any_size_is_one_run_and_is_found_by_any_of_its_tags():
    cache = ConfirmCache(capacity=1, max_age=10.0)
    cache.remember_runs(SOURCES[0], [(1000, 5000, 77)], 0.0)
    assert [cache.lookup(SOURCES[0], tag) for tag in (999, 1000, 3500, 5999, 6000)] == [None, 77, 2577, 5076, None]
    assert len(cache) == 5000


def test_remembering_a_tag_again_splits_the_older_run_and_the_latest_wins():
    cache = ConfirmCache(capacity=10, max_age=10.0)
    cache.remember_runs(SOURCES[0], [(10, 10, 100)], 0.0)  # tags 10..19
    cache.remember_runs(SOURCES[0], [(13, 2, 500)], 1.0)  # tags 13, 14 again
    assert [cache.lookup(SOURCES[0], tag) for tag in range(9, 21)] == \
        [None, 100, 101, 102, 500, 501, 105, 106, 107, 108, 109, None]
    cache.remember_runs(SOURCES[0], [(99, 1, 1)], 10.0)  # the first datagram expires with both its pieces
    assert [cache.lookup(SOURCES[0], tag) for tag in (10, 13, 15)] == [None, 500, None]


@given(st.lists(st.tuples(st.integers(1, 30), st.integers(1, 1 << 40)), max_size=50))
def test_runs_hold_exactly_the_pairs_they_were_made_of(pairs):
    runs = codec.pair_runs(pairs)
    assert [(tag + i, seq + i) for tag, count, seq in runs for i in range(count)] == pairs
    assert all(count >= 1 for _, count, _ in runs)


@given(st.lists(st.tuples(st.sampled_from(SOURCES), st.lists(st.integers(1, 50), min_size=1, max_size=5)),
                max_size=40))
def test_the_cache_answers_the_latest_sequence_of_every_tag_it_still_holds(datagrams):
    cache = ConfirmCache(capacity=1000, max_age=float("inf"))  # one datagram per second: none may expire
    latest = {}
    for now, (source, tags) in enumerate(datagrams):
        pairs = [(tag, 1000 * now + index) for index, tag in enumerate(tags)]
        remember(cache, source, pairs, float(now))
        latest.update({(source, tag): seq for tag, seq in pairs})
    assert all(cache.lookup(source, tag) == seq for (source, tag), seq in latest.items())
    assert len(cache) == len(latest)
