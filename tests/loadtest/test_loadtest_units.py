"""The load test's pure parts: schedules and pacing, payload stamps, tallies, loss accounting, the
measuring subscriber session, phase verdicts, the conductor's course of a run, settings, metrics parsing.

None of these modules imports Locust (which would monkey-patch this test process with gevent).
"""
from __future__ import annotations

import argparse
import json
import math
import urllib.request
from collections import Counter
from dataclasses import asdict
from itertools import groupby

import pytest
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from fyrehose.backbone.core import Backbone
from fyrehose.loadtest.account import DeliveryAccount, attribute
from fyrehose.loadtest.confirmed_publisher import ConfirmedPublisher
from fyrehose.loadtest.coordination import FINISH, TRUNCATE, Conductor
from fyrehose.loadtest.measuring_subscriber import Delivery, MeasuringSubscriber
from fyrehose.loadtest.prometheus import MetricsFormatError, parse_samples
from fyrehose.loadtest.rates import MAX_WAIT, Pacer, Phase, RateSchedule, build_schedule
from fyrehose.loadtest.results import GENERATOR_SHORTFALL, LOSS_LIMIT, judge, judge_all, render, summarize
from fyrehose.loadtest.settings import PREFIX, LoadSettings, add_setting_arguments
from fyrehose.loadtest.stamp import MIN_SIZE, published_ns, run_stamps, stamp
from fyrehose.loadtest.tally import Histogram, PhaseTally, RunTally, bucket_ms
from fyrehose.protocol import codec
from fyrehose.protocol.frame_run import FrameRun
from fyrehose.protocol.publishing import Finished
from fyrehose.protocol.tracker import Lost, Message
from fyrehose.runtime import metrics

BACKBONE = ("127.0.0.1", 2323)
PEER = ("127.0.0.1", 40000)
ANCHOR_NS = 1_700_000_000 * 10**9


# ---------------------------------------------------------------- schedules and pacing


@given(shape=st.sampled_from(["constant", "step", "spike"]), rate=st.floats(0.1, 1e6),
       duration=st.floats(0.5, 1000), step_time=st.floats(0.1, 100), factor=st.floats(0.1, 100))
@hypothesis_settings(deadline=None)
def test_every_shape_covers_its_duration_with_contiguous_phases(shape, rate, duration, step_time, factor):
    schedule = build_schedule(shape, rate, duration, step_time, factor)
    assert schedule.phases[0].start == 0
    assert math.isclose(schedule.end, duration)
    for before, after in zip(schedule.phases, schedule.phases[1:]):
        assert before.end == after.start
    for index, phase in enumerate(schedule.phases):
        middle = (phase.start + phase.end) / 2
        assert schedule.index_at(middle) == index
        assert schedule.rate_at(middle) == phase.rate
    assert schedule.rate_at(-0.1) == schedule.rate_at(schedule.end) == 0


def test_step_shape_adds_the_rate_per_step_and_spike_multiplies_it():
    steps = build_schedule("step", 100, 25, 10, 5)
    assert [(p.name, p.start, p.end, p.rate) for p in steps.phases] == [
        ("step 1", 0, 10, 100), ("step 2", 10, 20, 200), ("step 3", 20, 25, 300)]
    spike = build_schedule("spike", 100, 10, 10, 5)
    assert [(p.name, p.rate) for p in spike.phases] == [("before spike", 100), ("spike", 500), ("after spike", 100)]
    assert spike.phases[1].start == 4 and spike.phases[1].end == 6


@pytest.mark.parametrize("args", [("zigzag", 1, 1, 1, 1), ("step", 1, 1, 0, 1), ("constant", 0, 1, 1, 1),
                                  ("constant", 1, -1, 1, 1), ("spike", 1, 1, 1, 0)])
def test_impossible_shapes_are_refused(args):
    with pytest.raises(ValueError):
        build_schedule(*args)


def test_truncation_cuts_the_running_phase_and_marks_it():
    schedule = build_schedule("step", 100, 30, 10, 5)
    cut = schedule.truncated(15)
    assert [(p.name, p.end, p.cut_short) for p in cut.phases] == [("step 1", 10, False), ("step 2", 15, True)]
    assert cut.rate_at(16) == 0
    at_boundary = schedule.truncated(20)
    assert [p.cut_short for p in at_boundary.phases] == [False, False]
    assert schedule.truncated(99) is schedule
    with pytest.raises(ValueError):
        RateSchedule([Phase("a", 0, 1, 1), Phase("b", 2, 3, 1)])


@given(rate=st.floats(1, 5000), duration=st.floats(0.5, 5), busy=st.floats(0, 0.9))
@hypothesis_settings(max_examples=50, deadline=None)
def test_a_pacer_offers_its_rate(rate, duration, busy):
    """A user whose publish takes ``busy`` of the interval and who sleeps as told publishes rate x duration (+-1)."""
    pacer = Pacer(start=0.0)
    t = 0.0
    taken = 0
    for _ in range(100_000):
        if t >= duration:
            break
        if pacer.take(t, rate):
            taken += 1
            t += busy / rate
        t += pacer.wait(t, rate) or 1e-9
    assert abs(taken - rate * duration) <= 1 + 1e-9  # +-1 message, up to float rounding of rate x duration


def test_a_late_pacer_catches_up_only_its_slack():
    pacer = Pacer(start=0.0, slack=0.05)
    assert pacer.take(0.0, 100)
    # the user was busy for a whole second: it publishes the one that was due, then 0.05 s x 100/s = 5 of
    # backlog and the one due now, not the 100 it missed
    burst = 0
    while pacer.take(1.0, 100):
        burst += 1
    assert burst == 7
    assert pacer.wait(1.0, 100) == pytest.approx(0.01)
    assert not pacer.take(1.0, 0) and pacer.wait(1.0, 0) == MAX_WAIT


# ---------------------------------------------------------------- stamps and tallies


@given(st.integers(0, 2**64 - 1), st.integers(MIN_SIZE, 2000))
def test_stamps_round_trip(published, size):
    payload = stamp(published, size)
    assert len(payload) == size
    assert published_ns(payload) == published


@given(st.binary(max_size=64))
def test_foreign_payloads_carry_no_stamp(data):
    if not data.startswith(b"FHLT"):
        assert published_ns(data) is None


def test_stamps_need_room():
    with pytest.raises(ValueError):
        stamp(1, MIN_SIZE - 1)


@given(st.lists(st.floats(0, 1e5), min_size=1, max_size=300), st.floats(0.01, 0.999))
def test_histogram_percentiles_follow_locusts_definition(values, fraction):
    histogram = Histogram()
    for value in values:
        histogram.add(value)
    result = histogram.percentile(fraction)
    buckets = [bucket_ms(value) for value in values]
    below = int(len(values) * fraction)
    assert sum(b < result for b in buckets) <= below < sum(b <= result for b in buckets)
    assert histogram.percentile(1.0) == max(buckets)


@given(st.floats(0, 1e5), st.integers(1, 1000))
def test_a_weighted_sample_is_that_many_samples(value, count):
    weighted, repeated = Histogram(), Histogram()
    weighted.add(value, count)
    for _ in range(count):
        repeated.add(value)
    assert weighted == repeated


def test_buckets_keep_two_significant_digits():
    assert [bucket_ms(v) for v in (0.347, 1.234, 12.4, 147, 3432, 58760, -1)] == [
        0.35, 1.2, 12, 150, 3400, 59000, 0]
    assert Histogram().percentile(0.5) is None


tallies = st.builds(
    PhaseTally, pushes=st.integers(0, 1000), push_failures=st.integers(0, 10), direct=st.integers(0, 1000),
    recovered=st.integers(0, 100), lost=st.integers(0, 100), pending=st.integers(0, 100),
    receivers=st.integers(0, 4),
    push_ms=st.lists(st.floats(0, 1000), max_size=20).map(lambda vs: Histogram.from_pairs([(bucket_ms(v), 1) for v in vs])),
)


@given(st.dictionaries(st.integers(0, 5), tallies, max_size=4), st.dictionaries(st.integers(0, 5), tallies, max_size=4))
def test_tallies_survive_the_wire_and_merge_by_adding(first, second):
    one, two = RunTally(first), RunTally(second)
    wire = json.loads(json.dumps(one.to_dict()))  # Locust's messages carry plain data
    assert RunTally.from_dict(wire) == one
    merged = RunTally().merge(one).merge(two)
    for index in set(first) | set(second):
        assert merged[index].pushes == one[index].pushes + two[index].pushes
        assert merged[index].expected == one[index].expected + two[index].expected
        assert merged[index].push_ms.total == one[index].push_ms.total + two[index].push_ms.total


# ---------------------------------------------------------------- loss accounting


@given(st.dictionaries(st.integers(0, 8), st.integers(1, 2000), max_size=6),
       st.integers(1, 2500), st.integers(0, 500))
def test_attribution_splits_a_range_exactly(first_seqs, start, length):
    end = start + length
    counts = attribute(start, end, first_seqs)
    if not first_seqs:
        assert counts == {}
        return
    assert sum(counts.values()) == length + 1
    phases = sorted(first_seqs)
    lowest_from = {p: min(first_seqs[q] for q in phases if q >= p) for p in phases}

    def owner(seq):  # one sequence at a time, by the definition
        candidates = [p for p in phases if lowest_from[p] <= seq]
        return max(candidates) if candidates else phases[0]

    brute = {}
    for seq in range(start, end + 1):
        brute[owner(seq)] = brute.get(owner(seq), 0) + 1
    assert counts == brute


def phase_of(published):
    """Phases of one second each from ANCHOR_NS."""
    offset = published - ANCHOR_NS
    return None if offset < 0 else offset // 10**9


def payload(phase, size=16):
    return stamp(ANCHOR_NS + phase * 10**9 + 1000, size)


def test_the_account_sorts_arrivals_losses_and_latencies_by_phase():
    account = DeliveryAccount(phase_of)
    account.arrived([(seq, payload(0)) for seq in range(1, 11) if seq != 5], direct=True)
    account.arrived([(5, payload(0))], direct=False)
    account.arrived([(seq, payload(1)) for seq in range(11, 21)], direct=True)
    account.arrived([(99, b"not ours")], direct=True)
    account.lost(21, 22)  # above phase 1's first sequence: phase 1
    assert account.released(payload(1), 1, ANCHOR_NS + 10**9 + 1000 + 2_500_000) == pytest.approx(2.5)
    snapshot = account.snapshot([(23, 25)])
    assert (snapshot[0].direct, snapshot[0].recovered, snapshot[0].expected) == (9, 1, 10)
    assert (snapshot[1].direct, snapshot[1].lost, snapshot[1].pending, snapshot[1].expected) == (10, 2, 3, 15)
    assert snapshot[0].receivers == snapshot[1].receivers == 1
    assert snapshot[1].deliver_ms.percentile(0.5) == 2.5
    assert account.foreign == 1
    assert account.tally[1].pending == 0  # the snapshot is a copy


# ---------------------------------------------------------------- the measuring subscriber


def deliver(*frames):
    return b"".join(codec.encode_deliver(seq, data) for seq, data in frames)


def acked_session(give_up_after=1.0):
    session = MeasuringSubscriber(BACKBONE, DeliveryAccount(phase_of), give_up_after=give_up_after)
    sends, _ = session.handle_timers(0.0)
    (keepalive,) = codec.decode(sends[0])
    assert keepalive.flags == codec.FLAG_BATCH | codec.FLAG_HEAD | codec.FLAG_REDELIVERING | codec.FLAG_GONE  # wants HEAD
    session.receive(codec.encode(codec.KeepaliveAck(keepalive.token, head=0)), BACKBONE, 0.0)
    assert session.acked
    return session


def test_only_the_backbone_acknowledges_with_a_fresh_token():
    session = MeasuringSubscriber(BACKBONE, DeliveryAccount(phase_of), give_up_after=1.0)
    sends, _ = session.handle_timers(0.0)
    (keepalive,) = codec.decode(sends[0])
    session.receive(codec.encode(codec.KeepaliveAck(keepalive.token)), PEER, 0.0)
    session.receive(codec.encode(codec.KeepaliveAck(bytes(16))), BACKBONE, 0.0)
    assert not session.acked
    assert session.handle_timers(0.1)[0] == []  # the next KEEPALIVE is due after the interval
    assert len(session.handle_timers(0.5)[0]) == 1


def test_a_gap_recovered_from_a_peer_is_loss_before_recovery_only():
    session = acked_session()
    events, _ = session.receive(deliver((1, payload(0)), (2, payload(0)), (4, payload(0)), (5, payload(0))),
                                BACKBONE, 0.1)
    assert [event.seq for event in events] == [1, 2]
    sends, _ = session.handle_timers(0.2)  # past the reordering slack: the hole is REQUESTed
    assert codec.Request("0.0.0.0", 0, 3, 3) in [codec.decode(s)[0] for s in sends]
    events, _ = session.receive(deliver((3, payload(0))), PEER, 0.25)  # a peer re-DELIVERs it
    assert [event.seq for event in events] == [3, 4, 5]
    assert session.recovered == {3}
    session.receive(deliver((4, payload(0))), PEER, 0.3)  # a duplicate counts nowhere
    tally = session.snapshot()[0]
    assert (tally.direct, tally.recovered, tally.lost, tally.pending) == (4, 1, 0, 0)
    assert list(session.held.held(1, 5)) == [(seq, payload(0)) for seq in range(1, 6)]


def test_a_gap_nobody_fills_is_pending_then_lost():
    session = acked_session(give_up_after=1.0)
    session.receive(deliver((10, payload(0)), (13, payload(0))), BACKBONE, 0.1)
    assert session.snapshot()[0].pending == 2
    _, events = session.handle_timers(1.2)  # give-up time passed: the loss, then the message that waited behind it
    assert events == [Lost(11, 12, "not recovered"), Message(13, payload(0))]
    tally = session.snapshot()[0]
    assert (tally.direct, tally.lost, tally.pending, tally.expected) == (2, 2, 0, 4)


def test_finishing_gives_up_every_open_hole_and_head_reveals_a_lost_tail():
    session = acked_session()
    session.receive(deliver((1, payload(2))), BACKBONE, 0.1)
    sends, _ = session.handle_timers(0.5)
    (keepalive,) = codec.decode(sends[0])
    session.receive(codec.encode(codec.KeepaliveAck(keepalive.token, head=4)), BACKBONE, 0.5)
    lost = session.finish(0.6)
    assert [(loss.from_seq, loss.to_seq) for loss in lost] == [(2, 4)]
    assert session.snapshot()[2].lost == 3


def test_forwards_are_served_only_for_the_backbone_and_garbage_is_counted():
    session = acked_session()
    forward = codec.Forward("127.0.0.1", 5555, 1, 3)
    assert session.receive(codec.encode(forward), BACKBONE, 0.1) == ([], forward)
    assert session.receive(codec.encode(forward), PEER, 0.1) == ([], None)
    assert session.receive(b"", BACKBONE, 0.1) == ([], None)
    assert session.receive(b"\x99junk", BACKBONE, 0.1) == ([], None)
    assert session.stats["empty datagrams"] == 1 and session.stats["unknown frame types"] == 1
    assert session.stats["FORWARD from strangers"] == 1


@given(st.binary(max_size=200), st.sampled_from([BACKBONE, PEER]))
def test_no_datagram_crashes_the_session(datagram, source):
    session = acked_session()
    session.receive(datagram, source, 0.1)
    session.handle_timers(0.2)
    session.snapshot()


@given(st.lists(st.tuples(st.integers(1, 40), st.lists(st.one_of(
    st.binary(min_size=20, max_size=20),
    st.builds(lambda ns, tail: stamp(ns, 12) + tail, st.integers(0, (1 << 64) - 1), st.binary(min_size=8, max_size=8)),
), min_size=1, max_size=30)), min_size=1, max_size=6))
def test_forged_whole_datagrams_from_the_backbones_address_are_accounted_never_crash(datagrams):
    """Uniform DELIVER runs (what is taken whole) with any payloads, stamps or none, in any order."""
    session = acked_session()
    released = 0
    for first, payloads in datagrams:
        data = codec.pack([codec.Deliver(first + i, p) for i, p in enumerate(payloads)])
        events, _ = session.receive(data, BACKBONE, 0.1)
        released += sum(count for item in session.release(events, RELEASED_NS)
                        if not isinstance(item, Lost) for count in [item.messages])
    session.handle_timers(5.0)
    tally = session.snapshot()
    assert released <= sum(phase.direct for phase in tally.values())  # nothing released that was not counted


RELEASED_NS = ANCHOR_NS + 5 * 10**9
PAYLOADS = [payload(0), payload(1), payload(1, size=40), stamp(ANCHOR_NS - 1, 16), b"not ours", b""]


def per_message(arrivals, events, recovered):
    """The account by definition, one message at a time: (tally, first sequences, foreign, report)."""
    tally, first_seqs, foreign = RunTally(), {}, 0
    for seq, data, direct in arrivals:
        published = published_ns(data)
        if published is None:
            foreign += 1
            continue
        phase = phase_of(published)
        if phase is None:
            continue
        if direct:
            tally[phase].direct += 1
        else:
            tally[phase].recovered += 1
        first_seqs[phase] = min(first_seqs.get(phase, seq), seq)
    report = []
    for event in events:
        if isinstance(event, Lost):
            for seq in range(event.from_seq, event.to_seq + 1):
                for phase, count in attribute(seq, seq, first_seqs).items():
                    tally[phase].lost += count
            report.append(event)
            continue
        published = published_ns(event.data)
        if published is None or phase_of(published) is None:
            continue
        latency = (RELEASED_NS - published) / 1e6
        tally[phase_of(published)].deliver_ms.add(latency)
        report.append((event.seq in recovered, latency, len(event.data)))
    return tally, first_seqs, foreign, report


def blocks(report):
    """Each Lost, and the messages between them as a multiset of (recovered, latency, size)."""
    out = [Counter()]
    for item in report:
        if isinstance(item, Lost):
            out += [item, Counter()]
        elif isinstance(item, Delivery):
            assert item.size == item.messages * (item.size // item.messages)
            out[-1][(item.recovered, item.latency_ms, item.size // item.messages)] += item.messages
        else:
            out[-1][item] += 1
    return out


@given(st.lists(st.tuples(st.sampled_from(PAYLOADS + [None]), st.integers(1, 6), st.booleans()), max_size=12))
def test_runs_are_accounted_exactly_as_their_messages_one_by_one(segments):
    """Runs of one payload spanning phases, losses between them, recovered and foreign messages."""
    arrivals, events, seq = [], [], 100
    for data, count, recovered in segments:
        if data is None:  # a range given up
            events.append(Lost(seq, seq + count - 1, "not recovered"))
        else:
            arrivals += [(s, data, not recovered) for s in range(seq, seq + count)]
            events += [Message(s, data) for s in range(seq, seq + count)]
        seq += count
    recovered = {s for s, _, direct in arrivals if not direct}
    session = acked_session()
    account = session.account
    for direct, chunk in groupby(arrivals, key=lambda arrival: arrival[2]):  # a datagram per origin
        account.arrived([(s, data) for s, data, _ in chunk], direct)
    session.recovered.update(recovered)
    for event in events:
        if isinstance(event, Lost):
            account.lost(event.from_seq, event.to_seq)
    report = session.release(events, RELEASED_NS)
    tally, first_seqs, foreign, expected = per_message(arrivals, events, recovered)
    assert account.tally == tally
    assert (account.first_seqs, account.foreign) == (first_seqs, foreign)
    assert blocks(report) == blocks(expected)
    for origin in (False, True):  # with --batch, a DELIVER's time is its origin's first message's
        firsts = [item[1] for item in expected if not isinstance(item, Lost) and item[0] == origin][:1]
        assert [item.latency_ms for item in report if isinstance(item, Delivery) and item.recovered == origin][:1] == firsts
    assert session.recovered == set()  # each recovered sequence is reported once


def test_a_datagram_of_two_batches_is_two_runs():
    session = acked_session()
    frames = [(seq, payload(0)) for seq in (1, 2, 3)] + [(seq, payload(1)) for seq in (4, 5)]
    events, _ = session.receive(deliver(*frames, (6, b"not ours")), BACKBONE, 0.1)
    assert [event.seq for event in events] == [1, 2, 3, 4, 5, 6]
    latency = [(RELEASED_NS - ANCHOR_NS - phase * 10**9 - 1000) / 1e6 for phase in (0, 1)]
    assert session.release(events, RELEASED_NS) == [Delivery(False, latency[0], 3, 48), Delivery(False, latency[1], 2, 32)]
    tally = session.snapshot()
    assert (tally[0].direct, tally[0].deliver_ms.total, tally[1].direct, tally[1].deliver_ms.total) == (3, 3, 2, 2)
    assert session.account.foreign == 1


# ---------------------------------------------------------------- verdicts and the summary


def good_tally(rate, seconds, p99=1.0):
    tally = PhaseTally(pushes=int(rate * seconds), messages=int(rate * seconds), direct=int(rate * seconds) * 2,
                       receivers=2)
    for _ in range(100):
        tally.push_ms.add(0.5)
    for _ in range(5):  # enough to be the 99th percentile
        tally.push_ms.add(p99)
    return tally


def test_a_phase_is_sustained_only_when_every_criterion_holds():
    phase = Phase("step 1", 0, 10, 100)
    assert judge(phase, good_tally(100, 10), 1000.0, 50, final=True).sustained
    result = judge(phase, good_tally(100, 10), 1000.0, 50, final=True)
    assert (result.t_start, result.t_end, result.delivered_rate, result.confirmed_rate) == (1000, 1010, 100, 100)

    slow = good_tally(100, 10)
    for _ in range(5):
        slow.push_ms.add(80)
    lossy = good_tally(100, 10)
    lossy.recovered, lossy.direct = 2, lossy.direct - 2  # 0.1 % of 2000 missed the backbone's delivery
    short = good_tally(100, 10)
    short.direct = 1800  # 90 msgs/s per subscriber
    failing = good_tally(100, 10)
    failing.push_failures = 1
    for tally, reason in [(slow, "p99"), (lossy, "loss before recovery"), (short, "delivered"),
                          (failing, "unconfirmed"), (PhaseTally(), "no message")]:
        result = judge(phase, tally, 0, 50, final=True)
        assert not result.sustained and any(reason in text for text in result.reasons), result.reasons
    assert lossy.recovered / lossy.expected == LOSS_LIMIT
    cut = Phase("step 2", 10, 12, 200, cut_short=True)
    assert not judge(cut, good_tally(200, 2), 0, 50, final=True).sustained


def test_a_phases_figures_from_a_batched_tally():
    """Batches of 50: rates count messages, not requests; the subscribers' counts are averaged over them."""
    tally = PhaseTally(pushes=20, push_failures=1, messages=1000, message_failures=50, direct=1940, recovered=40,
                       lost=15, pending=5, receivers=2)
    result = judge(Phase("step 1", 5, 15, 100), tally, 1000.0, 50, final=True)
    assert (result.t_start, result.t_end, result.offered_rate) == (1005.0, 1015.0, 100)
    assert result.confirmed_rate == (1000 - 50) / 10  # messages CONFIRMed per second
    assert result.delivered_rate == (1940 + 40) / 2 / 10  # per subscriber: direct and recovered, not lost
    # final: what is still pending is no longer counted as lost after recovery (test_pending_counts... below)
    assert (result.expected, result.missed_before_recovery, result.lost_after_recovery) == (2000, 60, 15)
    assert (result.loss_before_recovery, result.loss_after_recovery) == (60 / 2000, 15 / 2000)
    assert (result.requests, result.failures) == (20, 1)


def test_pending_counts_as_unrecovered_until_final():
    tally = good_tally(100, 1)
    tally.pending = 4
    assert judge(Phase("c", 0, 1, 100), tally, 0, 50, final=False).lost_after_recovery == 4
    assert judge(Phase("c", 0, 1, 100), tally, 0, 50, final=True).lost_after_recovery == 0


def test_the_summary_reports_the_highest_sustained_rate():
    schedule = build_schedule("step", 100, 30, 10, 5)
    tally = RunTally({0: good_tally(100, 10), 1: good_tally(200, 10), 2: good_tally(300, 10, p99=900)})
    tally[2].lost = 3
    results = judge_all(schedule, tally, 0.0, 50, final=True)
    summary = summarize(results, tally, {"shape": "step"}, complete=True)
    assert summary["max_sustained_rate"] == 200
    assert summary["first_unsustained_phase"]["name"] == "step 3"
    assert summary["requests"] == 6000 and summary["failures"] == 0
    assert summary["messages_lost_after_recovery"] == 3
    assert summary["loss_after_recovery"] == pytest.approx(3 / summary["messages_expected"])
    assert summary["p50_ms"] == 0.5 and summary["shape"] == "step"


def test_a_step_run_counts_only_the_steps_before_the_first_unsustained_one():
    schedule = build_schedule("step", 100, 30, 10, 5)
    tally = RunTally({0: good_tally(100, 10, p99=900), 1: good_tally(200, 10), 2: good_tally(300, 10)})
    results = judge_all(schedule, tally, 0.0, 50, final=True)
    assert [result.sustained for result in results] == [False, True, True]
    step = summarize(results, tally, {"shape": "step"}, complete=True)
    assert step["max_sustained_rate"] == 0 and step["first_unsustained_phase"]["name"] == "step 1"
    spike = summarize(results, tally, {"shape": "spike"}, complete=True)  # other shapes: any sustained phase
    assert spike["max_sustained_rate"] == 300


RUN = {"shape": "constant", "users": 4, "subscribers": 2, "batch": 0, "backbone": "127.0.0.1:2323",
       "p99_threshold_ms": 50}


def sent_tally(sent, delivered, seconds, p99=1.0):
    """A phase whose publishers sent ``sent`` msgs/s, of which each of 2 subscribers received ``delivered``."""
    tally = PhaseTally(pushes=round(sent * seconds), messages=round(sent * seconds),
                       direct=round(delivered * seconds) * 2, receivers=2)
    tally.push_ms.add(0.5, 100)
    tally.push_ms.add(p99, 5)
    return tally


def report(shape, tallies, rate=20000):
    schedule = build_schedule(shape, rate, 15 * len(tallies), 15, 5)
    tally = RunTally(dict(enumerate(tallies)))
    results = judge_all(schedule, tally, 0.0, 50, final=True)
    summary = summarize(results, tally, {**RUN, "shape": shape}, complete=True)
    return results, summary, render(summary, [asdict(result) for result in results])


def test_a_generator_that_sent_what_was_asked_is_reported_as_sent():
    results, summary, text = report("constant", [sent_tally(20000, 20000, 15)])
    assert results[0].sustained and not results[0].generator_fell_short
    assert (results[0].offered_rate, results[0].asked_rate, results[0].sent_rate) == (20000, 20000, 20000)
    assert summary["max_sustained_rate"] == 20000 and summary["max_sent_rate"] == 20000
    assert summary["generator_shortfall"] is None
    header, row = text.splitlines()[1:3]
    assert header.split()[1:4] == ["asked/s", "sent/s", "delivered/s"]
    assert row.split()[1:4] == ["20000", "20000.0", "20000.0"]
    assert "max sustained rate: 20000 msgs/s (" in text and "generator" not in text


def test_a_generator_that_fell_short_is_named_instead_of_a_sustained_rate_of_zero():
    """The reported case: 20,000 msgs/s asked of 4 unbatched users, which sent 4,320/s; all of it arrived."""
    results, summary, text = report("constant", [sent_tally(4320, 4319.4, 15)])
    result = results[0]
    assert result.generator_fell_short and not result.sustained
    assert (result.asked_rate, result.sent_rate) == (20000, 4320)
    assert result.reasons == [f"generator fell short: sent 4320/s of the 20000/s asked (< {GENERATOR_SHORTFALL:.0%})"]
    # the old keys keep their meaning: offered_rate is the rate asked, nothing sustained it
    assert result.offered_rate == 20000 and summary["max_sustained_rate"] == 0
    assert summary["generator_shortfall"] == {"phase": "constant", "asked_rate": 20000, "sent_rate": 4320,
                                              "delivered_rate": pytest.approx(4319.4), "backbone_kept_up": True,
                                              "backbone_reasons": []}
    row = text.splitlines()[2]
    assert row.split()[1:4] == ["20000", "4320.0", "4319.4"] and "no: generator fell short" in row
    assert "max sustained rate: 0" not in text
    assert ("max sustained rate: not measured: the load generator sent at most 4320 msgs/s of the 20000 asked "
            "(22%, in constant); the backbone delivered all of it (4319 msgs/s per subscriber): "
            "raise --users or --batch, or use more --workers") in text
    json.dumps(summary)  # summary.json


def test_the_generator_threshold():
    """Below GENERATOR_SHORTFALL of the asked rate the generator fell short; just above, a shortfall in
    delivery is still the phase's (as before), with what was sent in its reason."""
    short = judge(Phase("constant", 0, 10, 1000), sent_tally(899, 899, 10), 0.0, 50, final=True)
    assert short.generator_fell_short and short.reasons[0].startswith("generator fell short")
    close = judge(Phase("constant", 0, 10, 1000), sent_tally(910, 910, 10), 0.0, 50, final=True)
    assert not close.generator_fell_short and not close.sustained
    assert close.reasons == ["delivered 910/s < 95% of asked 1000/s (sent 910/s)"]
    # a phase cut short stopped publishing early: it says nothing of the generator
    cut = judge(Phase("step 2", 10, 12, 1000, cut_short=True), sent_tally(100, 100, 2), 0.0, 50, final=True)
    assert not cut.generator_fell_short


def test_a_generator_that_fell_short_of_a_backbone_that_did_not_keep_up_either():
    results, summary, text = report("constant", [sent_tally(4000, 3000, 15, p99=900)])
    assert results[0].generator_fell_short
    shortfall = summary["generator_shortfall"]
    assert not shortfall["backbone_kept_up"]
    assert shortfall["backbone_reasons"] == ["delivered 3000/s < 95% of the 4000/s sent", "p99 900 ms >= 50 ms"]
    assert ("max sustained rate: not measured: the load generator sent at most 4000 msgs/s of the 20000 asked "
            "(20%, in constant); and the backbone did not keep up even with that: delivered 3000/s") in text


def test_a_step_run_whose_generator_fell_short_after_sustained_steps():
    results, summary, text = report("step", [sent_tally(1000, 1000, 15), sent_tally(2000, 2000, 15),
                                             sent_tally(2400, 2400, 15)], rate=1000)
    assert [result.generator_fell_short for result in results] == [False, False, True]
    assert summary["max_sustained_rate"] == 2000 and summary["first_unsustained_phase"]["name"] == "step 3"
    assert summary["generator_shortfall"]["phase"] == "step 3" and summary["max_sent_rate"] == 2400
    assert "max sustained rate: 2000 msgs/s (" in text
    assert ("generator fell short: the load generator sent at most 2400 msgs/s of the 3000 asked (80%, in step 3); "
            "the backbone delivered all of it") in text


# ---------------------------------------------------------------- the conductor's course of a run


def test_the_conductor_stops_a_failing_step_drains_and_writes_the_results(tmp_path):
    settings = LoadSettings(shape="step", rate=100, duration=30, step_time=10, drain=2, p99_ms=50, timeout=1,
                            out=str(tmp_path))
    sent = []
    conductor = Conductor(settings, lambda kind, data: sent.append((kind, data)), lambda: {"w1", "w2"})
    assert conductor.handle_timers(5.0)  # not started yet: keep the users
    conductor.start(1000.0)
    assert conductor.settled_at(1010.0) == 1011.5  # step 1's last publish may resolve a timeout after it ends

    def report(node, at, tally, final=False):
        conductor.receive(node, {"tally": tally.to_dict(), "sent_at": at, "final": final})

    good = RunTally({0: good_tally(50, 10)})
    report("w1", 1011.6, good)
    report("w2", 1011.2, good)  # w2 has not reported past step 1's settling time yet
    assert conductor.handle_timers(1011.7) and sent == []
    broken = RunTally({0: good_tally(50, 10, p99=300)})
    report("w2", 1012.0, broken)
    assert conductor.handle_timers(1012.1)
    assert sent == [(TRUNCATE, {"at": 1012.1})]
    assert conductor.schedule.end == pytest.approx(12.1)
    assert conductor.handle_timers(1013.0) and sent[-1][0] == TRUNCATE  # draining
    assert conductor.handle_timers(1014.2) and sent[-1] == (FINISH, {})
    report("w1", 1014.3, good, final=True)
    report("w1", 1014.4, RunTally())  # a late periodic report never replaces a final one
    assert conductor.handle_timers(1014.5)  # w2 is not final yet
    report("w2", 1014.6, broken, final=True)
    assert not conductor.handle_timers(1014.7)
    steps = [json.loads(line) for line in (tmp_path / "steps.jsonl").read_text().splitlines()]
    assert [step["name"] for step in steps] == ["step 1", "step 2"]
    assert steps[0]["requests"] == 1000 and not steps[0]["sustained"]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["complete"] and summary["duration_s"] == pytest.approx(12.1)
    assert summary["max_sustained_rate"] == 0 and summary["backbone"] == settings.backbone
    assert summary["workers"] == 2  # the workers that reported, whether or not the command started them


def test_a_step_is_judged_only_after_its_slowest_publish_resolved(tmp_path):
    """A publish that times out after the step ended still fails that step, before the next one is passed."""
    settings = LoadSettings(shape="step", rate=100, duration=30, step_time=10, p99_ms=50, timeout=2,
                            out=str(tmp_path))
    sent = []
    conductor = Conductor(settings, lambda kind, data: sent.append(kind), lambda: {"w1"})
    conductor.start(0.0)
    on_time = RunTally({0: good_tally(50, 10)})
    conductor.receive("w1", {"tally": on_time.to_dict(), "sent_at": 11.0, "final": False})
    assert conductor.handle_timers(11.0) and sent == []  # the tally looks good, but publishes may still be unresolved
    late = RunTally({0: good_tally(50, 10)})
    late[0].pushes += 5
    late[0].push_failures += 5  # timed out 2 s after being sent near the end of step 1
    conductor.receive("w1", {"tally": late.to_dict(), "sent_at": 12.6, "final": False})
    assert conductor.handle_timers(12.6) and sent == [TRUNCATE]


def test_the_conductor_gives_up_waiting_for_a_silent_worker(tmp_path):
    settings = LoadSettings(duration=1, drain=0, out=str(tmp_path))
    sent = []
    conductor = Conductor(settings, lambda kind, data: sent.append(kind), lambda: {"w1"})
    conductor.start(0.0)
    assert conductor.handle_timers(1.0) and conductor.handle_timers(1.1) and sent == [FINISH]
    assert conductor.handle_timers(5.0)
    assert not conductor.handle_timers(11.2)
    assert json.loads((tmp_path / "summary.json").read_text())["complete"] is False


# ---------------------------------------------------------------- settings


def test_the_command_runs_locust_on_the_locustfile_of_the_loadtest_package():
    from fyrehose.commands.loadtest import LOCUSTFILE

    assert LOCUSTFILE.is_file() and LOCUSTFILE.parent.name == "loadtest"


def test_settings_cross_to_locust_unchanged():
    original = LoadSettings(backbone="127.0.0.1:9", users=7, rate=12.5, shape="spike", out="/tmp/x", workers=2)
    parser = argparse.ArgumentParser()
    add_setting_arguments(parser, prefix=PREFIX)
    parsed = parser.parse_args(original.to_locust_argv())
    assert LoadSettings.from_namespace(parsed, PREFIX.replace("-", "_")) == original


@pytest.mark.parametrize("change, message", [
    ({"users": 0}, "--users"), ({"rate": 0}, "--rate"), ({"size": 3}, "--size"), ({"timeout": 30}, "--timeout"),
    ({"drain": -1}, "--drain"), ({"shape": "zigzag"}, "--shape"), ({"backbone": "nowhere"}, "HOST:PORT"),
    ({"step_time": 0}, "--step-time"), ({"duration": math.inf}, "--duration"), ({"rate": math.nan}, "--rate"),
])
def test_impossible_settings_are_refused_in_one_line(change, message):
    with pytest.raises(ValueError, match=message):
        LoadSettings(**change).validate()


# ---------------------------------------------------------------- metrics


metric_names = st.from_regex(r"[a-z_][a-z0-9_]{0,20}", fullmatch=True)


@given(st.lists(st.tuples(metric_names, st.dictionaries(metric_names, st.text(max_size=10), max_size=2),
                          st.floats(-1e12, 1e12)), max_size=10, unique_by=lambda m: m[0]))
def test_what_the_backbone_renders_parses_back(samples):
    text = metrics.render((name, "gauge", "help text", [(labels, value)]) for name, labels, value in samples)
    parsed = parse_samples(text)
    assert len(parsed) == len(samples)
    for (name, labels, value), (key, parsed_value) in zip(samples, parsed.items()):
        assert parsed_value == value
        assert key == name if not labels else key.startswith(name + "{") and key.endswith("}")


def test_labelled_samples_keep_their_exposed_names():
    text = 'x_total{reason="a b}c"} 3 1700000000\n# HELP y\ny 4.5\n\n'
    assert parse_samples(text) == {'x_total{reason="a b}c"}': 3.0, "y": 4.5}
    for bad in ("lonely", "x{a=\"1\" 2", "x notanumber", "x 1 2 3"):
        with pytest.raises(MetricsFormatError):
            parse_samples(bad)


def test_a_live_backbone_exposes_what_the_sampler_reads(backbone):
    url = f"http://127.0.0.1:{backbone.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=5) as response:
        samples = parse_samples(response.read().decode())
    assert "fyrehose_pushes_total" in samples
    assert any(key.startswith('fyrehose_process_cpu_seconds_total{process="') for key in samples)


# ---------------------------------------------------------------- the batched publishers' session


PUBLISHER = ("127.0.0.1", 41000)


def _sequence(backbone: Backbone, datagrams: list[bytes], now: float, drop=lambda index: False) -> list[bytes]:
    """The backbone's answers to the publisher for ``datagrams`` (those ``drop`` picks never arrive)."""
    for index, datagram in enumerate(datagrams):
        if not drop(index):
            backbone.receive(datagram, PUBLISHER, now)
    return [bytes(data) for data, target in backbone.flush(now).sends if target == PUBLISHER]


def _signed_on(now: float = 0.0) -> tuple[ConfirmedPublisher, Backbone]:
    session, backbone = ConfirmedPublisher(BACKBONE, timeout=2.0), Backbone()
    for answer in _sequence(backbone, session.handle_timers(now)[0], now):  # KEEPALIVE (BATCH): CONFIRMs come packed
        session.receive(answer, BACKBONE, now)
    assert session.acked
    return session, backbone


def test_a_batch_is_packed_tagged_and_finished_by_the_backbones_confirms():
    session, backbone = _signed_on()
    number, datagrams = session.publish([stamp(ANCHOR_NS, 64)] * 1500, 0.1)
    assert len(datagrams) == 2 and sum(len(d) for d in datagrams) == 1500 * (64 + codec.FRAME_HEADER)
    answers = _sequence(backbone, datagrams, 0.1)
    assert len(answers) == 1  # 1,500 CONFIRMs in one datagram
    assert session.receive(answers[0], PEER, 0.1) == []  # a stranger's copy counts for nothing
    assert session.receive(answers[0], BACKBONE, 0.1) == [Finished(number, list(range(1, 1501)))]
    assert session.receive(answers[0], BACKBONE, 0.1) == [] and session.pending == 0
    assert backbone.sequence.last_issued == 1500


def test_unconfirmed_messages_are_sent_again_with_their_tags_and_never_sequenced_twice():
    session, backbone = _signed_on()
    number, datagrams = session.publish([b"m%062d" % i for i in range(1000)], 0.0)
    assert len(datagrams) == 2
    first = _sequence(backbone, datagrams, 0.0, drop=lambda index: index == 1)  # the second datagram is lost
    assert session.receive(first[0], BACKBONE, 0.0) == []
    assert session.handle_timers(0.1) == ([], [])  # before the retry time
    resent, finished = session.handle_timers(0.25)
    assert finished == [] and len(resent) == 1 and session.stats["push retries"] < 1000
    second = _sequence(backbone, resent + datagrams[:1], 0.25)  # the first datagram arrives again too
    assert [done for answer in second for done in session.receive(answer, BACKBONE, 0.25)] == [
        Finished(number, list(range(1, 1001)))]
    assert backbone.sequence.last_issued == 1000 and backbone.counters["duplicate pushes"] > 0


def test_a_batch_without_every_confirm_fails_at_its_timeout_and_late_confirms_are_ignored():
    session, backbone = _signed_on()
    number, datagrams = session.publish([b"x"] * 10, 0.0)
    for now in (0.2, 0.6, 1.4):
        assert session.handle_timers(now)[1] == []
    assert session.handle_timers(2.0)[1] == [Finished(number, None, 10)] and session.pending == 0
    for answer in _sequence(backbone, datagrams, 2.1):
        assert session.receive(answer, BACKBONE, 2.1) == []


@given(st.lists(st.tuples(st.one_of(st.binary(max_size=120), st.builds(
    lambda tags: b"".join(codec.encode_confirm(tag, 7) for tag in tags), st.lists(st.integers(1, 40), max_size=8))),
    st.sampled_from([BACKBONE, PEER])), max_size=6))
def test_no_datagram_crashes_the_publishing_session_and_a_strangers_confirm_finishes_nothing(datagrams):
    session = ConfirmedPublisher(BACKBONE, timeout=2.0)
    session.publishes._next_tag = 1  # tags 1..10: the forged CONFIRMs above name them
    number, _ = session.publish([b"x"] * 10, 0.0)
    finished = [done for datagram, source in datagrams for done in session.receive(datagram, source, 0.1)]
    if all(source == PEER for _, source in datagrams):
        assert finished == [] and session.pending == 1
    assert all(done.batch == number for done in finished)
    session.handle_timers(5.0)
    assert session.pending == 0  # given up at its timeout, whatever arrived


@given(st.lists(st.sampled_from([10**18, 10**18 + 1, 10**18 + 7, 5]), min_size=1, max_size=120), st.integers(1, 1000))
def test_a_runs_stamps_are_read_whole_as_message_by_message(stamps, first):
    payloads = [stamp(value, 20) for value in stamps]
    data = b"".join(codec.encode_deliver(first + i, p) for i, p in enumerate(payloads))
    stretches = run_stamps(FrameRun(first, len(payloads), codec.FRAME_HEADER + 20, data))
    assert [(value, seq) for value, count, lowest in stretches for seq in range(lowest, lowest + count)] == \
        [(published_ns(p), first + i) for i, p in enumerate(payloads)]
    assert [(value, count) for value, count, _ in stretches] == \
        [(value, len(list(same))) for value, same in groupby(stamps)]


def test_a_run_with_a_payload_not_ours_has_no_stamps():
    payloads = [stamp(7, 20)] * 3 + [b"x" * 20]
    data = b"".join(codec.encode_deliver(1 + i, p) for i, p in enumerate(payloads))
    assert run_stamps(FrameRun(1, 4, codec.FRAME_HEADER + 20, data)) is None
