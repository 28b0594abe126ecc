"""Sessions: the pure session table and local session, and expiry end to end through the cache."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fyrehose import Client
from fyrehose.subjects.envelope import MsgType, Status
from fyrehose.subjects.session_table import (
    BYE,
    HEARTBEAT,
    HELLO,
    Heartbeat,
    LocalSession,
    SessionTable,
    StartOptions,
    parse_session,
    stop_wants_ack,
)

from support import EVENT_WITHIN, CacheProcess, take_until

# ---------------------------------------------------------------- pure: the session table

def test_subscriptions_expire_after_missed_heartbeats():
    table = SessionTable(default_interval=1.0)
    table.heartbeat("sam.n", 0.5, now=0.0)
    table.start("sam.n", "q.x", None, now=0.0)
    table.start("sam.n", "q.y", 10.0, now=0.0)  # asked to outlive the session by 10 s
    assert table.expire(1.4) == []
    assert table.expire(1.6) == ["q.x"]
    assert table.subjects_of("sam.n") == {"q.y"}
    table.heartbeat("sam.n", None, now=5.0)
    assert table.expire(14.9) == []
    table.heartbeat("sam.n", None, now=14.0)
    assert table.expire(24.1) == ["q.y"]
    assert "sam.n" not in table  # silent and without subscriptions: gone
    table.heartbeat("bob.n", 1.0, now=30.0)
    assert table.expire(32.9) == [] and "bob.n" in table
    assert table.expire(33.1) == [] and "bob.n" not in table


def test_only_the_last_subscriber_leaving_empties_a_subject():
    table = SessionTable()
    for session in ("a.1", "b.2"):
        table.start(session, "q.x", None, 0.0)
    assert table.stop("a.1", "q.x") == []
    assert table.stop("a.1", "q.x") == []  # not subscribed any more
    assert table.bye("b.2") == ["q.x"]
    assert table.bye("b.2") == []


def test_bounds_refuse_and_count():
    table = SessionTable(max_sessions=1, max_subscriptions=2)
    assert table.start("a.1", "q.x", None, 0.0)
    assert not table.start("b.2", "q.x", None, 0.0)
    assert table.start("a.1", "q.y", None, 0.0)
    assert not table.start("a.1", "q.z", None, 0.0)
    assert table.refused == 2


operations = st.lists(st.tuples(
    st.sampled_from(["heartbeat", "start", "stop", "bye", "expire"]),
    st.sampled_from(["a.1", "b.2", "c.3"]),
    st.sampled_from(["q.x", "q.y"]),
    st.floats(0.0, 3.0),
    st.none() | st.floats(0.1, 5.0),
), max_size=40)


@settings(max_examples=200)
@given(operations)
def test_emptied_subjects_are_exactly_those_that_lost_their_last_subscriber(ops):
    table = SessionTable(default_interval=0.5)
    now = 0.0
    for op, session, subject, step, number in ops:
        now += step
        before = {s: table.subscribers(s) for s in ("q.x", "q.y")}
        if op == "heartbeat":
            table.heartbeat(session, number, now)
            emptied = []
        elif op == "start":
            table.start(session, subject, number, now)
            emptied = []
        elif op == "stop":
            emptied = table.stop(session, subject)
        elif op == "bye":
            emptied = table.bye(session)
        else:
            emptied = table.expire(now)
        after = {s: table.subscribers(s) for s in ("q.x", "q.y")}
        assert sorted(emptied) == sorted(s for s in before if before[s] and not after[s])
        deadline = table.next_deadline()
        if deadline is not None and deadline > now:
            assert table.expire(now) == []  # nothing is due before the announced deadline


# ---------------------------------------------------------------- pure: local session and payloads

def test_local_session_stamps_increasing_seqnos_and_remembers_its_heartbeats():
    session = LocalSession("sam", interval=0.5)
    user, nonce = parse_session(session.name)
    assert user == "sam" and len(nonce) == 32
    hello, beat = session.hello(1_000), session.heartbeat(1_000)  # same microsecond: still distinguishable
    assert (hello.subject, beat.subject, session.bye().subject) == (HELLO, HEARTBEAT, BYE)
    assert [hello.seqno, beat.seqno] == [1, 2]
    first, second = Heartbeat.decode(hello.data), Heartbeat.decode(beat.data)
    assert first.time_us != second.time_us and first.interval == 0.5
    assert session.cnonce_sent_at(first.time_us) == first.cnonce
    assert session.cnonce_sent_at(second.time_us) == second.cnonce
    assert LocalSession("sam").name != session.name


@pytest.mark.parametrize("name", ["sam", "sam.n.x", "sa m.n", "*.n", "", "sam."])
def test_bad_session_names(name):
    with pytest.raises(ValueError):
        parse_session(name)


@pytest.mark.parametrize("user", ["a.b", "a b", ">", ""])
def test_users_must_be_one_token(user):
    with pytest.raises(ValueError):
        LocalSession(user)


@given(st.binary(max_size=200))
def test_session_payload_decoders_raise_only_value_error(data):
    for decoder in (Heartbeat.decode, StartOptions.decode, stop_wants_ack):
        try:
            decoder(data)
        except ValueError:
            pass


@pytest.mark.parametrize("data", [
    b'{"time":-1,"interval":1,"cnonce":"c"}', b'{"time":1.5,"interval":1,"cnonce":"c"}',
    b'{"time":1,"interval":0,"cnonce":"c"}', b'{"time":1,"interval":1,"cnonce":""}',
    b'{"time":1,"interval":NaN,"cnonce":"c"}', b'{"time":true,"interval":1,"cnonce":"c"}',
    b'{"time":1e400,"interval":1,"cnonce":"c"}', b'[' * 5000,
])
def test_bad_heartbeats_are_refused(data):
    with pytest.raises(ValueError):
        Heartbeat.decode(data)


@given(st.booleans(), st.booleans(), st.none() | st.floats(0, 1e6))
def test_start_options_round_trip(initial, ack, expires):
    options = StartOptions(initial, ack, expires)
    assert StartOptions.decode(options.encode()) == options
    assert StartOptions.decode(b"") == StartOptions()


# ---------------------------------------------------------------- end to end

SUBSCRIBER = textwrap.dedent("""
    import sys, time
    from fyrehose import Client
    client = Client(sys.argv[1], user="sam", session_interval=2.0)
    stream = client.subscribe("q.x", initial=True)
    first = stream.get(timeout=60)
    print(first.type.name, first.status.name, flush=True)
    time.sleep(60)
""")


def test_an_expired_sessions_subscriptions_go_away(backbone, tmp_path):
    with CacheProcess(backbone, tmp_path) as cache, Client(backbone.addr) as watcher:
        drops = watcher.subscribe("q.x")
        subscriber = subprocess.Popen([sys.executable, "-c", SUBSCRIBER, backbone.address],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            assert subscriber.stdout.readline().split() == [b"INITIAL", b"NOT_FOUND"]
            # heartbeats every 2 s keep it beyond 2 s (its grace is 6 s: a subscriber kept off a core for 4 s
            # on a busy machine still heartbeats in time)
            assert drops.get(timeout=2.0) is None
            subscriber.kill()  # no BYE: only the missing heartbeats tell
            subscriber.wait(10)
            drop = take_until(drops, lambda m: m.type == MsgType.DROP)  # after the kill, not before
            assert (drop.subject, drop.status) == ("q.x", Status.NOSUBSCRIBERS)
        finally:
            if subscriber.poll() is None:
                subscriber.kill()
                subscriber.wait(10)
    assert cache.summary()["nosubscribers_sent"] == 1


def test_bye_ends_the_subscriptions_at_once(backbone, tmp_path):
    with CacheProcess(backbone, tmp_path), Client(backbone.addr) as watcher:
        drops = watcher.subscribe("q.>")
        with Client(backbone.addr, user="sam", session_interval=5.0) as sam:
            sam.subscribe("q.x", initial=True).get(timeout=EVENT_WITHIN)
            sam.subscribe("q.y", initial=True).get(timeout=EVENT_WITHIN)
        got = [take_until(drops, lambda m: m.type == MsgType.DROP) for _ in range(2)]
        assert sorted((m.subject, m.status) for m in got) == [("q.x", Status.NOSUBSCRIBERS),
                                                             ("q.y", Status.NOSUBSCRIBERS)]
