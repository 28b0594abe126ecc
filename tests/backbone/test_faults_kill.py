"""kill -9 of each process of the multi-process backbone while clients publish and subscribe.

Expected outcome, for a receive worker, the sequencer and a fan-out worker:
the supervisor forks it again (and counts the restart); no sequence number is
ever issued twice (every CONFIRM names a distinct one, no subscriber sees one
twice); the publisher and the subscriber carry on by themselves, and every
message published after the restart reaches the subscriber.  Messages in
flight inside the killed process may be lost, but never silently: the
subscriber either gets them (REQUEST recovery) or an explicit Lost event.
"""
from __future__ import annotations

import threading
import time

import pytest

from fyrehose import Client
from fyrehose.drivers.client import FyrehoseError
from fyrehose.protocol.tracker import Lost, Message

from support import EVENT_WITHIN, wait_until, workers_of

ROLES = ["fh-receiver-0", "fh-sequencer", "fh-fanout-0"]


@pytest.mark.parametrize("role", ROLES)
def test_kill_9_under_load_is_recovered_without_reusing_a_sequence(backbone_factory, role):
    backbone = backbone_factory(workers=2)
    assert wait_until(lambda: set(ROLES) <= set(workers_of(backbone)))
    victim = workers_of(backbone)[role]
    confirmed: list[int] = []
    failures: list[Exception] = []
    stop = threading.Event()
    with Client(backbone.addr) as keeper, Client(backbone.addr, give_up_after=3) as sub, \
            Client(backbone.addr, subscribe=False) as pub:
        keeper.subscribe()
        stream = sub.subscribe(on_loss="yield")

        def publish() -> None:
            i = 0
            while not stop.is_set() and i < 100_000:
                try:
                    confirmed.extend(pub.publish_many([b"load %d.%d" % (i, k) for k in range(10)], timeout=5))
                except FyrehoseError as exc:  # the killed process held the batch: counted, then go on
                    failures.append(exc)
                i += 1
                time.sleep(0.005)

        publisher = threading.Thread(target=publish, daemon=True)
        publisher.start()
        try:
            assert wait_until(lambda: len(confirmed) >= 500)
            victim.kill()
            assert wait_until(lambda: getattr(workers_of(backbone).get(role), "pid", victim.pid) != victim.pid)
            at_restart = len(confirmed)
            assert wait_until(lambda: len(confirmed) >= at_restart + 500, EVENT_WITHIN), "publishing did not resume"
        finally:
            stop.set()
            publisher.join(10)
        after = pub.publish_many([b"final %d" % k for k in range(50)])
        events = []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            event = stream.get(timeout=0.2)
            if event is not None:
                events.append(event)
                last = event.seq if isinstance(event, Message) else event.to_seq
                if last >= after[-1]:
                    break
    worker = role.removeprefix("fh-")
    assert backbone.metric(f'fyrehose_worker_restarts_total{{worker="{worker}"}}') == 1
    issued = confirmed + after
    assert len(set(issued)) == len(issued), "a sequence number was confirmed twice"
    received = [e.seq for e in events if isinstance(e, Message)]
    assert len(set(received)) == len(received), "a subscriber got a sequence twice"
    assert received == sorted(received)
    assert received[-50:] == after, "the subscriber did not resume"
    lost = {s for e in events if isinstance(e, Lost) for s in range(e.from_seq, e.to_seq + 1)}
    first = issued[0]
    missing = set(issued) - set(received)
    assert missing <= lost, f"confirmed sequences missing without a Lost event: {sorted(missing)[:20]}"
    assert set(range(first, after[-1] + 1)) <= set(received) | lost, "a gap went unreported"
