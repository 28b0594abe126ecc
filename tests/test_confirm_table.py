"""The shared-memory table of confirmed tags: the pure table, and exactly once across a sequencer kill -9."""
from __future__ import annotations

import socket
import time
from collections import defaultdict

from hypothesis import given
from hypothesis import strategies as st
from test_faults_kill import workers_of

from fyrehose import codec
from fyrehose.backbone.confirm_table import PROBE, SharedConfirmTable
from fyrehose.process import wait_until

SOURCES = [("127.0.0.1", 4000), ("127.0.0.1", 4001), ("10.1.2.3", 4000)]


def table(slots: int = 1024, max_age: float = 30.0) -> SharedConfirmTable:
    return SharedConfirmTable(memoryview(bytearray(SharedConfirmTable.region_size(slots))), slots, max_age)


@given(st.lists(st.tuples(st.sampled_from(SOURCES), st.integers(1, codec.MAX_TAG), st.integers(1, 1 << 48)),
                max_size=60))
def test_what_was_just_remembered_is_found_and_the_latest_wins(operations):
    confirmed = table()
    for now, (source, tag, seq) in enumerate(operations):
        confirmed.remember(source, tag, seq, float(now))
        assert confirmed.lookup(source, tag) == seq
    assert confirmed.lookup(("192.0.2.1", 1), 1) is None


def test_a_full_window_forgets_its_oldest_entry_first():
    confirmed = table(slots=PROBE)  # one window: every tag competes for the same slots
    for tag in range(1, PROBE + 2):
        confirmed.remember(SOURCES[0], tag, 100 + tag, float(tag))
    assert confirmed.lookup(SOURCES[0], 1) is None
    assert [confirmed.lookup(SOURCES[0], tag) for tag in range(2, PROBE + 2)] == list(range(102, 102 + PROBE))
    assert len(confirmed) == PROBE


def test_expired_entries_are_reused_before_live_ones():
    confirmed = table(slots=PROBE, max_age=10.0)
    confirmed.remember(SOURCES[0], 1, 11, 0.0)
    for tag in range(2, PROBE + 1):
        confirmed.remember(SOURCES[0], tag, 10 + tag, 50.0)
    confirmed.remember(SOURCES[1], 99, 99, 55.0)  # tag 1 is 55 s old: its slot goes, every live one stays
    assert confirmed.lookup(SOURCES[0], 1) is None
    assert all(confirmed.lookup(SOURCES[0], tag) == 10 + tag for tag in range(2, PROBE + 1))
    assert confirmed.lookup(SOURCES[1], 99) == 99


def test_a_new_table_over_the_same_memory_remembers_and_a_torn_slot_reads_as_empty():
    region = memoryview(bytearray(SharedConfirmTable.region_size(64)))
    SharedConfirmTable(region, 64).remember(SOURCES[2], 7, 70, 1.0)
    restarted = SharedConfirmTable(region, 64)
    assert restarted.lookup(SOURCES[2], 7) == 70
    words = region.cast("Q")
    slot = next(i for i in range(0, len(words), 4) if words[i])
    words[slot] = 0  # a writer killed after clearing the key
    assert restarted.lookup(SOURCES[2], 7) is None


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
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as publisher:
        publisher.bind(("127.0.0.1", 0))

        def push(tags: range) -> None:
            frames = [codec.encode_push(b"tagged %d" % tag, tag) for tag in tags]
            for datagram in codec.pack_greedy(frames):
                publisher.sendto(datagram, backbone.addr)

        for batch in range(20):  # load: 20 packed datagrams of 200 tagged PUSHes, CONFIRMs read as they come
            push(range(batch * 200 + 1, batch * 200 + 201))
            _confirms(publisher, seen, 0.02)
            if batch == 10:
                victim.kill()  # mid-stream: some tags sequenced and confirmed, some in flight, some not yet sent
        wait_until(lambda: getattr(workers_of(backbone).get("fh-sequencer"), "pid", victim.pid) != victim.pid, 20)
        for _ in range(10):  # every tag retried until confirmed, as a publisher whose CONFIRMs were lost would
            push(range(1, 4001))
            _confirms(publisher, seen, 0.5)
            if len(seen) == 4000:
                break
    assert len(seen) == 4000, "some tags were never confirmed"
    twice = {tag: seqs for tag, seqs in seen.items() if len(seqs) > 1}
    assert not twice, f"tags sequenced twice: {dict(list(twice.items())[:5])}"
    seqs = [next(iter(s)) for s in seen.values()]
    assert len(set(seqs)) == len(seqs), "two tags share a sequence"
    assert backbone.metric('fyrehose_worker_restarts_total{worker="sequencer"}') == 1
