"""The gateways' gevent bridge to a real backbone, in this process: shared publishes, filtered routing.

gevent runs here without monkey patching, exactly as in a gateway process:
the bridge's link is a gevent driver of the pure backbone session.
"""
from __future__ import annotations

import threading
import time
from collections import Counter

import gevent

from fyrehose import Client
from fyrehose.envelope import Envelope
from fyrehose.gateways.bridge import Bridge


def wait_until(condition, timeout: float, what: str, interval: float = 0.01) -> None:
    """Poll on the gevent loop (the bridge runs only while this greenlet waits cooperatively)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what} did not happen within {timeout:g} s"
        gevent.sleep(interval)


def _bridge(backbone, routed, wanted=None):
    stats: Counter = Counter()
    bridge = Bridge(backbone.address, lambda seq, message: routed.append((seq, message)), stats=stats,
                    wants=wanted)
    return bridge, stats


def test_publishes_of_many_clients_in_one_loop_turn_share_one_batch_and_keep_each_order(module_backbone):
    routed: list = []
    bridge, stats = _bridge(module_backbone, routed)
    try:
        results: dict[int, list[int]] = {}

        def client(number: int) -> None:
            results[number] = bridge.publish([Envelope(f"bridge.c{number}", b"%d-%d" % (number, i)) for i in range(5)])

        greenlets = [gevent.spawn(client, number) for number in range(20)]
        gevent.joinall(greenlets, timeout=10, raise_error=True)
        assert stats["publish batches"] == 1  # twenty clients, one tagged batch, answered by shared CONFIRMs
        assert stats["published"] == 100
        for number, seqs in results.items():
            assert seqs == sorted(seqs) and len(seqs) == 5, (number, seqs)
        everything = sorted(seq for seqs in results.values() for seq in seqs)
        assert everything == list(range(everything[0], everything[0] + 100))  # one batch: consecutive numbers
        wait_until(lambda: len([m for m in routed if m[1].subject.startswith("bridge.c")]) >= 100, 10,
                   "the batch coming back through the stream")
        by_seq = {seq: message for seq, message in routed}
        for number, seqs in results.items():
            assert [by_seq[seq].data for seq in seqs] == [b"%d-%d" % (number, i) for i in range(5)]
    finally:
        bridge.close()


def test_only_wanted_subjects_are_opened_and_routed(module_backbone):
    routed: list = []
    asked: list[str] = []

    def wanted(subject: str) -> bool:
        asked.append(subject)
        return subject.startswith("keep.")

    bridge, stats = _bridge(module_backbone, routed, wanted)
    try:
        seqs = bridge.publish([Envelope("drop.me", b"1"), Envelope("keep.me", b"2"), Envelope("drop.too", b"3")])
        wait_until(lambda: bridge.position >= seqs[-1], 10, "the stream reaching the publishes")
        mine = [(seq, message.subject) for seq, message in routed if seq in seqs]
        assert mine == [(seqs[1], "keep.me")]
        assert {"drop.me", "keep.me", "drop.too"} <= set(asked)
    finally:
        bridge.close()


def test_announcements_and_the_deployments_interest_reach_the_table(module_backbone):
    routed: list = []
    bridge, _ = _bridge(module_backbone, routed, lambda subject: False)
    try:
        with Client(module_backbone.addr) as other:
            other.subscribe("elsewhere.>")
            wait_until(lambda: bridge.subscribers_elsewhere("elsewhere.x") == 1, 10,
                       "the client's announcement counted by the bridge")
        bridge.interest.add("here.x")
        assert bridge.subscribers_elsewhere("here.x") == 0  # its own interest is not counted as elsewhere
    finally:
        bridge.close()


def test_no_thread_is_started(module_backbone):
    before = threading.active_count()
    bridge, _ = _bridge(module_backbone, [])
    try:
        assert threading.active_count() == before
        assert bridge.reachable
        assert bridge.publish([Envelope("bridge.alone", b"x")])
    finally:
        bridge.close()


def test_an_empty_publish_is_answered_at_once(module_backbone):
    bridge, stats = _bridge(module_backbone, [])
    try:
        assert bridge.publish([]) == []
        assert stats["publish batches"] == 0
    finally:
        bridge.close()
