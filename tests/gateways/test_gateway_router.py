"""The gateways' gevent router to a real backbone, in this process: shared publishes, filtered routing.

gevent runs here without monkey patching, exactly as in a gateway process:
the router's link is a gevent driver of the pure backbone connection.
"""
from __future__ import annotations

import threading
import time
from collections import Counter

import gevent

from fyrehose import Client
from fyrehose.drivers.link import RangeLink
from fyrehose.gateways.drivers.router import YIELD_EVERY, GatewayRouter
from fyrehose.protocol.codec import encode_deliver
from fyrehose.protocol.frame_run import FrameRun
from fyrehose.protocol.tracker import Message
from fyrehose.subjects.envelope import Envelope, decode, encode
from fyrehose.subjects.session import SubjectSession

from support import EVENT_WITHIN


def wait_until(condition, timeout: float, what: str, interval: float = 0.01) -> None:
    """Poll on the gevent loop (the router runs only while this greenlet waits cooperatively)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what} did not happen within {timeout:g} s"
        gevent.sleep(interval)


def _router(backbone, routed, wanted=None):
    stats: Counter = Counter()
    router = GatewayRouter(backbone.address, lambda seq, message: routed.append((seq, message)), stats=stats,
                    wants=wanted)
    return router, stats


def test_publishes_of_many_clients_in_one_loop_turn_share_one_batch_and_keep_each_order(module_backbone):
    routed: list = []
    router, stats = _router(module_backbone, routed)
    try:
        results: dict[int, list[int]] = {}

        def client(number: int) -> None:
            results[number] = router.publish([Envelope(f"router.c{number}", b"%d-%d" % (number, i)) for i in range(5)])

        greenlets = [gevent.spawn(client, number) for number in range(20)]
        gevent.joinall(greenlets, timeout=10, raise_error=True)
        assert stats["publish batches"] == 1  # twenty clients, one tagged batch, answered by shared CONFIRMs
        assert stats["published"] == 100
        for number, seqs in results.items():
            assert seqs == sorted(seqs) and len(seqs) == 5, (number, seqs)
        everything = sorted(seq for seqs in results.values() for seq in seqs)
        assert everything == list(range(everything[0], everything[0] + 100))  # one batch: consecutive numbers
        wait_until(lambda: len([m for m in routed if m[1].subject.startswith("router.c")]) >= 100, EVENT_WITHIN,
                   "the batch coming back through the stream")
        by_seq = {seq: message for seq, message in routed}
        for number, seqs in results.items():
            assert [by_seq[seq].data for seq in seqs] == [b"%d-%d" % (number, i) for i in range(5)]
    finally:
        router.close()


def test_only_wanted_subjects_are_opened_and_routed(module_backbone):
    routed: list = []
    asked: list[str] = []

    def wanted(subject: str) -> bool:
        asked.append(subject)
        return subject.startswith("keep.")

    router, stats = _router(module_backbone, routed, wanted)
    try:
        seqs = router.publish([Envelope("drop.me", b"1"), Envelope("keep.me", b"2"), Envelope("drop.too", b"3")])
        wait_until(lambda: router.position >= seqs[-1], EVENT_WITHIN, "the stream reaching the publishes")
        mine = [(seq, message.subject) for seq, message in routed if seq in seqs]
        assert mine == [(seqs[1], "keep.me")]
        assert {"drop.me", "keep.me", "drop.too"} <= set(asked)
    finally:
        router.close()


def test_a_subject_is_decided_once_until_the_interest_changes_then_decided_again(module_backbone):
    """Whole datagrams are chosen from the verdicts remembered per subject; a subscription forgets them."""
    routed: list = []
    asked: list[str] = []
    subscribed: set[str] = set()

    def wanted(subject: str) -> bool:
        asked.append(subject)
        return subject in subscribed

    router, stats = _router(module_backbone, routed, wanted)
    try:
        seqs = router.publish([Envelope("late.subject", b"%d" % i) for i in range(300)])
        wait_until(lambda: router.position >= seqs[-1], EVENT_WITHIN, "the stream passing 300 unwanted messages")
        assert asked.count("late.subject") == 1 and routed == []
        subscribed.add("late.subject")
        router.interest.add("late.subject")  # what every protocol's SUBSCRIBE does
        seqs = router.publish([Envelope("late.subject", b"%d" % i) for i in range(300)])
        wait_until(lambda: len(routed) == 300, EVENT_WITHIN, "the 300 messages published after the subscription")
        assert [seq for seq, _ in routed] == seqs
        assert [message.data for _, message in routed] == [b"%d" % i for i in range(300)]
        assert asked.count("late.subject") == 2
    finally:
        router.close()


def test_a_subscription_made_while_a_datagram_is_routed_gets_everything_after_the_position(module_backbone):
    """The loop serves the clients every YIELD_EVERY routed messages, in the middle of a datagram; a subscription
    made then is owed every matching message after ``position``, which the rest of the datagram is chosen again for."""
    routed: list = []
    subscribed = {"mid.early"}
    router, _ = _router(module_backbone, routed, lambda subject: subject in subscribed)
    seen_at: list[int] = []

    def subscribe_when_served() -> None:
        seen_at.append(router.position)
        subscribed.add("mid.later")
        router.interest.add("mid.later")

    try:
        gevent.sleep(0.2)  # the router's start (its first datagrams) is over
        count = 2 * YIELD_EVERY + 20
        frames = b"".join(encode_deliver(10**9 + index, encode(Envelope("mid.early" if index % 2 else "mid.later",
                                                                          b"%05d" % index)))
                          for index in range(2 * count))
        step = len(frames) // (2 * count)
        gevent.spawn(subscribe_when_served)
        router._take_runs([FrameRun(10**9, 2 * count, step, frames)])
        assert len(seen_at) == 1
        later = [seq for seq, message in routed if message.subject == "mid.later"]
        assert later == [seq for seq in range(seen_at[0] + 1, 10**9 + 2 * count) if (seq - 10**9) % 2 == 0]
        assert [seq for seq, m in routed if m.subject == "mid.early"] == list(range(10**9 + 1, 10**9 + 2 * count, 2))
    finally:
        router.close()


def test_announcements_and_the_deployments_interest_reach_the_table(module_backbone):
    routed: list = []
    router, _ = _router(module_backbone, routed, lambda subject: False)
    try:
        with Client(module_backbone.addr) as other:
            other.subscribe("elsewhere.>")
            wait_until(lambda: router.subscribers_elsewhere("elsewhere.x") == 1, EVENT_WITHIN,
                       "the client's announcement counted by the router")
        router.interest.add("here.x")
        assert router.subscribers_elsewhere("here.x") == 0  # its own interest is not counted as elsewhere
    finally:
        router.close()


def test_no_thread_is_started(module_backbone):
    before = threading.active_count()
    router, _ = _router(module_backbone, [])
    try:
        assert threading.active_count() == before
        assert router.reachable
        assert router.publish([Envelope("router.alone", b"x")])
    finally:
        router.close()


def test_an_empty_publish_is_answered_at_once(module_backbone):
    router, stats = _router(module_backbone, [])
    try:
        assert router.publish([]) == []
        assert stats["publish batches"] == 0
    finally:
        router.close()


def test_the_router_knows_where_its_stream_began_and_where_it_is_routed_or_not(module_backbone):
    """What an SSE backfill hands over by: everything after ``position``, or from ``first`` on, is routed."""
    routed: list = []
    router, _ = _router(module_backbone, routed, lambda subject: False)
    try:
        assert router.first == 0 and not router.started.is_set()
        seqs = router.publish([Envelope("router.unwanted", b"x")])
        assert router.started.wait(10), "the router took nothing within 10 s"
        assert 0 < router.first <= seqs[0]
        wait_until(lambda: router.position >= seqs[0], EVENT_WITHIN, "the position passing a message nobody wanted")
        assert routed == []
    finally:
        router.close()


def _publish(backbone, subject: str, count: int) -> list[int]:
    router, _ = _router(backbone, [])
    try:
        return router.publish([Envelope(subject, b"%d" % i) for i in range(count)])
    finally:
        router.close()


def test_a_range_link_fetches_from_its_first_sequence_to_the_end_it_is_told_and_no_further(module_backbone):
    seqs = _publish(module_backbone, "range.x", 5)
    events: list = []
    before = threading.active_count()
    fetch = RangeLink(module_backbone.address, SubjectSession(), events.extend, first=seqs[1], stats=Counter())
    try:
        assert threading.active_count() == before
        fetch.stop_at(seqs[3])
        assert fetch.done.wait(10), f"the range {seqs[1]}..{seqs[3]} not fetched within 10 s: {events}"
        later = _publish(module_backbone, "range.x", 1)  # live traffic after the end
        wait_until(lambda: fetch.link.connection.tracker.next > later[0], EVENT_WITHIN, "the link taking the later message")
        assert all(type(event) is Message for event in events)
        assert [event.seq for event in events] == seqs[1:4]  # one batch: consecutive numbers
        assert [decode(event.data).data for event in events] == [b"1", b"2", b"3"]
        assert fetch.reached == seqs[3]
    finally:
        fetch.close()


def test_a_range_link_told_an_end_it_has_passed_is_done_at_once(module_backbone):
    seqs = _publish(module_backbone, "range.y", 3)
    events: list = []
    fetch = RangeLink(module_backbone.address, SubjectSession(), events.extend, first=seqs[0], stats=Counter())
    try:
        wait_until(lambda: fetch.reached >= seqs[-1], EVENT_WITHIN, "the fetch reaching the backbone's last message")
        fetch.stop_at(seqs[1])
        assert fetch.done.is_set()
        assert [event.seq for event in events][:3] == seqs
    finally:
        fetch.close()
