"""The pair's pure halves: the primary's gate (grants, sync mode, detaching) and the standby's follower (holding
in order, REPLAYs, a new epoch, the takeover plan), and the two together over a lossy, reordering link."""
from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from fyrehose.backbone.core import Backbone
from fyrehose.backbone.pair import frames
from fyrehose.backbone.pair.primary import ReplicationSource
from fyrehose.backbone.pair.standby import REBASE_AFTER, REPLAY_AFTER, ReplicaFollower
from fyrehose.protocol import codec

PUBLISHER = ("10.0.0.5", 5000)


def state(last: int, *, epoch: int = 1, delivered: int | None = None, want: int = 0, flags: int = 0,
          clean_ms: int = 0) -> frames.State:
    return frames.State(epoch, frames.ROLE_PRIMARY, flags, last, last if delivered is None else delivered, want,
                        clean_ms, [])


def record(first: int, count: int, epoch: int = 1, runs: list | None = None) -> frames.Record:
    data = b"".join(codec.encode_deliver(seq, b"m%d" % seq) for seq in range(first, first + count))
    return frames.Record(epoch, first, first + count - 1, PUBLISHER, runs or [], data)


def test_a_primary_expecting_its_peer_holds_output_until_it_grants_this_epoch_or_stays_silent_the_timeout():
    source = ReplicationSource(3, sync=True, min_grant=100, max_grant=1000, timeout=1.0)
    source.expect(heard=10.0)
    assert source.attached and not source.releasable(1)
    assert not source.handle_timers(10.9) and source.handle_timers(11.1)  # silent since it was heard: alone
    assert source.releasable(10**9)
    answered = ReplicationSource(3, sync=True, min_grant=100, max_grant=1000, timeout=1.0)
    answered.expect(heard=10.0)
    answered.on_ack(frames.Ack(3, 1, 100), last_issued=1, now=10.5)
    assert answered.releasable(1) and not answered.handle_timers(11.1)


def test_an_attached_primary_releases_only_what_is_granted_and_in_sync_mode_only_what_is_held():
    source = ReplicationSource(1, sync=False, min_grant=100, max_grant=1000)
    assert source.releasable(10**9)  # no standby yet: alone
    assert source.want(0, 0.0) == 100
    source.on_ack(frames.Ack(1, 0, 100), last_issued=0, now=0.0)
    assert source.attached and source.releasable(100) and not source.releasable(101)
    assert source.want(40, 0.001) == 100 and source.want(51, 10.0) == 151  # renewed at half a block, 5/s: smallest
    source.on_ack(frames.Ack(1, 0, 151), last_issued=51, now=10.0)
    assert source.want(140, 10.001) == 1140  # 89 numbers in 1 ms: 89,000/s, 4,450 in GRANT_TIME: the largest
    sync = ReplicationSource(1, sync=True, min_grant=100, max_grant=1000)
    sync.on_ack(frames.Ack(1, 0, 100), last_issued=0, now=0.0)
    assert not sync.releasable(1)
    held = ReplicationSource(1, sync=True, min_grant=100, max_grant=1000)
    assert held.want(0, 0.0) == 100 and held.want(60, 1e-6) == 160  # 60 numbers in 1 µs: too short to tell a rate
    sync.on_ack(frames.Ack(1, 5, 100), last_issued=5, now=0.1)
    assert sync.releasable(5) and not sync.releasable(6)


def test_a_silent_standby_is_detached_after_the_timeout_and_says_how_long_the_primary_stays_gated():
    source = ReplicationSource(1, sync=True, timeout=1.0)
    source.on_ack(frames.Ack(1, 0, 10_000), last_issued=0, now=5.0)
    assert source.clean_ms(5.25) == 750 and source.flags() == frames.STATE_SYNC | frames.STATE_ATTACHED
    assert not source.handle_timers(5.9) and not source.releasable(1)
    assert source.handle_timers(6.01) and source.releasable(1) and source.clean_ms(6.01) == 0
    assert source.flags() == frames.STATE_SYNC and source.detachments == 1
    source.on_ack(frames.Ack(1, 0, 10_000), last_issued=20_000, now=7.0)  # alone, it went past the grant
    assert not source.attached  # reattached only once it granted every number issued
    source.on_ack(frames.Ack(1, 0, 30_000), last_issued=20_000, now=7.1)
    assert source.attached


def test_replay_returns_the_kept_records_that_overlap_and_old_ones_are_forgotten_by_size():
    source = ReplicationSource(1, sync=False, replay_bytes=250)
    for first in range(1, 40, 10):
        source.keep(first, first + 9, [bytes(100)])
    assert len(source.replay(frames.Replay(1, 1, 40))) == 2  # 250 bytes hold the two newest
    assert source.replay(frames.Replay(1, 35, 35)) == [bytes(100)]


def test_the_follower_holds_in_order_and_asks_for_what_it_misses():
    follower = ReplicaFollower(0, persisted=0)
    follower.newer(1)
    assert [r.first for r in follower.on_record(record(1, 5), 0.0)] == [1]
    assert follower.on_record(record(9, 2), 0.0) == [] and follower.held == 5
    assert follower.replays(0.0) == []  # reordering gets its moment first
    replay, = follower.replays(REPLAY_AFTER + 0.001)
    assert frames.decode(replay) == frames.Replay(1, 6, 8)
    assert follower.replays(REPLAY_AFTER + 0.002) == []  # not again at once
    assert [r.first for r in follower.on_record(record(6, 3), 0.1)] == [6, 9] and follower.held == 10
    assert follower.on_record(record(6, 3), 0.1) == []  # a duplicate
    assert frames.decode(follower.ack()) == frames.Ack(1, 10, 0)


def test_a_follower_that_first_hears_a_state_follows_on_from_there_and_is_fit_once_caught_up():
    follower = ReplicaFollower(0, persisted=0)
    follower.newer(2)
    follower.on_state(state(1000, epoch=2), 0.0)
    assert follower.base == 1000 and follower.caught_up
    follower.on_state(state(1010, epoch=2), 0.1)
    assert follower.caught_up  # judged against what was issued when it first heard the primary
    late = ReplicaFollower(0, persisted=0)
    late.on_record(record(1, 10), 0.0)
    late.on_state(state(30), 0.0)
    assert not late.caught_up
    late.on_record(record(11, 20), 0.0)
    assert late.caught_up


def test_a_hole_the_primary_cannot_replay_is_given_up_and_the_follower_goes_on_above_it():
    follower = ReplicaFollower(0, persisted=0)
    follower.on_record(record(1, 1), 0.0)
    follower.on_record(record(50, 1), 0.0)
    follower.replays(0.0)
    follower.replays(REPLAY_AFTER + 0.01)
    assert follower.replays(REBASE_AFTER + 0.1) == [] and follower.held == 49
    assert [r.first for r in follower.on_record(record(50, 1), REBASE_AFTER + 0.2)] == [50]


def test_a_newer_epoch_starts_the_held_stream_over():
    follower = ReplicaFollower(0, persisted=0)
    follower.newer(1)
    follower.on_record(record(1, 10), 0.0)
    assert follower.newer(2) and follower.held == 0 and follower.base is None
    assert not follower.newer(2) and not follower.newer(1)


def test_the_takeover_plan_starts_above_every_grant_and_says_what_is_unknown():
    follower = ReplicaFollower(0, persisted=0)
    follower.newer(3)
    follower.on_record(record(1, 100), 0.0)
    follower.on_state(state(120, epoch=3, delivered=90, flags=frames.STATE_SYNC | frames.STATE_ATTACHED,
                            clean_ms=800), 1.0)
    follower.on_state(state(120, epoch=3, delivered=90, want=5000, flags=frames.STATE_SYNC | frames.STATE_ATTACHED,
                            clean_ms=800), 1.0)
    follower.persisted_up_to(4000)
    assert follower.granted == 4000  # only what is on disk is granted
    follower.persisted_up_to(9000)
    assert follower.granted == 5000  # and only what the primary asked for
    clean = follower.takeover(1.5)
    assert (clean.epoch, clean.start, clean.resend, clean.unknown, clean.never_sent) == \
        (4, 5001, (91, 100), (101, 5000), True)
    late = follower.takeover(1.9)  # the primary may have detached this standby by now
    assert not late.never_sent
    asynchronous = ReplicaFollower(0, persisted=70_000)  # a mark of its own earlier life as primary
    asynchronous.on_record(record(1, 300), 0.0)
    asynchronous.on_state(state(300, delivered=300, want=300), 0.0)
    asynchronous.persisted_up_to(70_000)
    plan = asynchronous.takeover(0.1)
    assert (plan.start, plan.resend, plan.unknown, plan.never_sent) == (301, None, None, False)
    assert ReplicaFollower(0, persisted=70_000).takeover(0.0).start == 70_001  # having followed no one


def run_pair(pushes: list[tuple[int, int]], loss: float, seed: int) -> tuple[Backbone, Backbone, ReplicaFollower]:
    """A primary core sequencing tagged pushes, its RECORDs crossing a lossy, reordering link to a follower
    that REPLAYs until it holds everything; returns (primary, standby core, follower)."""
    rng = random.Random(seed)
    primary = Backbone()
    primary.replicas = []
    source = ReplicationSource(1, sync=True)
    standby = Backbone()
    follower = ReplicaFollower(0, persisted=0)
    follower.newer(1)
    in_flight: list[bytes] = []
    now = 0.0
    tag = 1
    for count, size in pushes:
        datagram = b"".join(codec.encode(codec.Push(bytes(size), tag + i)) for i in range(count))
        tag += count
        primary.receive(datagram, PUBLISHER, now)
        primary.flush(now)
        for entry, publisher, runs in primary.replicas:
            first = int.from_bytes(entry.view[3:9], "big")
            encoded = frames.records_for(1, entry, first, publisher, runs)
            source.keep(first, first + entry.count - 1, encoded)
            in_flight += [d for d in encoded if rng.random() >= loss]
        primary.replicas.clear()
    last = primary.sequence.last_issued
    for _ in range(200):  # bounded: each round delivers what is in flight and answers the REPLAYs
        rng.shuffle(in_flight)
        for datagram in in_flight:
            frame = frames.decode(datagram)
            assert isinstance(frame, frames.Record)
            for held in follower.on_record(frame, now):
                standby.hold_replica(held.frames, held.last - held.first + 1, held.source, held.runs, now)
        in_flight = []
        follower.on_state(state(last), now)
        now += 0.1
        for request in follower.replays(now):
            in_flight += source.replay(frames.decode(request))  # the replies themselves are not lost
        if follower.held >= last:
            break
    return primary, standby, follower


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 40), st.integers(0, 300)), min_size=1, max_size=20),
       st.floats(0, 0.5), st.integers(0, 2**32))
def test_over_a_lossy_link_the_standby_ends_up_holding_every_message_and_every_tag(pushes, loss, seed):
    primary, standby, follower = run_pair(pushes, loss, seed)
    last = primary.sequence.last_issued
    first_held = follower.base + 1
    assert follower.held == last
    assert [seq for seq, _ in standby.recent.frames(first_held, last)] == list(range(first_held, last + 1))
    assert [bytes(f) for _, f in standby.recent.frames(first_held, last)] == \
        [bytes(f) for _, f in primary.recent.frames(first_held, last)]
    total = sum(count for count, _ in pushes)
    for tag in range(1, total + 1):
        seq = primary.confirmed.lookup(PUBLISHER, tag)
        if seq is not None and seq >= first_held:
            assert standby.confirmed.lookup(PUBLISHER, tag) == seq


def test_a_demoted_primary_promoted_again_says_at_once_that_the_numbers_it_reserved_were_never_sent():
    # it issued up to 1014 and sent the output up to 1000 (the rest was held back when it was demoted, and
    # dropped with its tags); its state file reserves up to 66550; it heard no newer primary since
    follower = ReplicaFollower(3, 66550, issued=1014, delivered=1000)
    follower.persisted_up_to(66550)
    plan = follower.takeover(5.0)
    assert (plan.epoch, plan.start) == (4, 66551)
    assert plan.unknown == (1001, 66550) and plan.never_sent  # a GONE at once, not a give-up time per subscriber
    assert plan.resend is None


def test_a_demoted_primary_that_hears_a_newer_primary_follows_that_stream_instead_of_its_own():
    follower = ReplicaFollower(3, 66550, issued=1014, delivered=1014)
    assert follower.newer(4)
    follower.on_state(state(70000, epoch=4, want=70100), 1.0)
    follower.persisted_up_to(70100)
    plan = follower.takeover(2.0)
    assert plan.start == 70101 and plan.unknown == (70001, 70100) and not plan.never_sent and plan.resend is None


def test_a_takeover_its_primary_said_answered_is_asked_for_again_when_the_follower_is_promoted():
    # the primary's takeover left 29..4097 open (STATEs: DELIVERED 28, the stream held from 4098), then said them
    # answered (a subscriber heard after its GONE); over a link cut one way, primary to clients, the GONE never
    # arrived: the promoted follower looks for them at the journals again, and what nobody has is GONE once more
    follower = ReplicaFollower(0, persisted=0)
    follower.newer(3)
    follower.on_state(state(4097, epoch=3, delivered=28, flags=frames.STATE_NEVER_SENT, want=8194), 1.0)
    follower.on_record(record(4098, 11, epoch=3), 1.01)
    follower.on_state(state(4108, epoch=3, want=8194), 1.5)
    follower.persisted_up_to(8194)
    plan = follower.takeover(2.0)
    assert (plan.start, plan.unknown, plan.reopen, plan.resend) == (8195, (4109, 8194), (29, 4097), None)
    assert ReplicaFollower(0, persisted=0).takeover(2.0).reopen is None  # nothing heard, nothing to ask again
    # DELIVERED below the stream without the flag is output not sent yet (a late standby): sent since, not reopened
    late = ReplicaFollower(0, persisted=0)
    late.on_state(state(27, delivered=25, want=1024), 1.0)
    late.on_record(record(28, 8), 1.01)
    late.on_state(state(35, want=1024), 1.5)
    late.persisted_up_to(1024)
    assert late.takeover(2.0).reopen is None
