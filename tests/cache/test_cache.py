"""The pure cache against the type/status table (docs/subjects.md) row by row, plus its memory bound and merge rule."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fyrehose.cache.core import RECORD_OVERHEAD, STICKY, Cache
from fyrehose.cache.merge import merge, merge_many, merge_patch
from fyrehose.subjects.envelope import Envelope, MsgType, Status
from fyrehose.subjects.session_table import SessionTable, StartOptions

INBOX = "_INBOX.sam.n1.1"
T, S = MsgType, Status


def publish(cache, subject, data=b"", kind=T.UPDATE, status=S.OK, now=0.0, session=None):
    return cache.receive(Envelope(subject, data, kind, status, session=session, seqno=1 if session else None), now)


def snap(cache, subject):
    (answer,) = cache.receive(Envelope("_SNAP." + subject, reply=INBOX), 0.0)
    assert answer.subject == INBOX
    return answer


def start(cache, subject, session="sam.n1", now=0.0, **options):
    data = StartOptions(**options).encode()
    return cache.receive(Envelope("_SUB.START." + subject, data, reply=INBOX, session=session, seqno=1), now)


def answer_of(cache, subject):
    (answer,) = start(cache, subject, session=None)
    return answer.type, answer.status, answer.data


# ---------------------------------------------------------------- start / stop

def test_start_ack():
    cache = Cache()
    answers = start(cache, "q.x", ack=True, initial=False)
    assert [(a.subject, a.type, a.status, a.data) for a in answers] == [(INBOX, T.START, S.ACK, b"")]


def test_start_ack_then_initial_when_both_asked():
    cache = Cache()
    publish(cache, "q.x", b"v", T.INITIAL)
    answers = start(cache, "q.x", ack=True)
    assert [(a.type, a.status) for a in answers] == [(T.START, S.ACK), (T.INITIAL, S.OK)]


def test_stop_ack():
    cache = Cache()
    start(cache, "q.x", initial=False)
    answers = cache.receive(Envelope("_SUB.STOP.q.x", b'{"ack":true}', reply=INBOX, session="sam.n1", seqno=2), 0.0)
    assert (T.DROP, S.NOSUBSCRIBERS) in [(a.type, a.status) for a in answers]  # the last subscriber left
    assert [(a.subject, a.type, a.status) for a in answers if a.type == T.STOP] == [(INBOX, T.STOP, S.ACK)]


# ---------------------------------------------------------------- snap

def test_snap_ok_answers_the_value():
    cache = Cache()
    publish(cache, "q.x", b"value", T.INITIAL)
    answer = snap(cache, "q.x")
    assert (answer.type, answer.status, answer.data) == (T.INITIAL, S.OK, b"value")


def test_snap_not_found_has_type_snap_and_no_data():
    answer = snap(Cache(), "q.nothing")
    assert (answer.type, answer.status, answer.data) == (T.SNAP, S.NOT_FOUND, b"")


@pytest.mark.parametrize("status", [S.TEMP_UNAVAIL, S.BAD_ACCESS, S.BAD_NAME, S.FEED_DOWN, S.STALE, S.PERM_DENIED])
def test_snap_reports_the_record_status(status):
    cache = Cache()
    publish(cache, "q.x", b"v1")
    publish(cache, "q.x", b"v2", T.UPDATE, status)
    answer = snap(cache, "q.x")
    assert (answer.type, answer.status, answer.data) == (T.INITIAL, status, b"v2")


# ---------------------------------------------------------------- initial

def test_initial_ok_replaces_rather_than_merges():
    cache = Cache()
    publish(cache, "q.x", b'{"a":1,"b":2}')
    publish(cache, "q.x", b'{"c":3}', T.INITIAL)
    assert answer_of(cache, "q.x") == (T.INITIAL, S.OK, b'{"c":3}')


def test_initial_verify_when_a_verify_reinitialized_a_missing_record():
    cache = Cache()
    publish(cache, "q.x", b'{"bid":0}', T.VERIFY)
    assert answer_of(cache, "q.x") == (T.INITIAL, S.VERIFY, b'{"bid":0}')
    publish(cache, "q.x", b'{"bid":5}')  # the first update makes it an ordinary live record
    assert answer_of(cache, "q.x") == (T.INITIAL, S.OK, b'{"bid":5}')


def test_initial_not_found_for_a_start_without_record():
    assert answer_of(Cache(), "q.x") == (T.INITIAL, S.NOT_FOUND, b"")


def test_initial_not_found_from_a_publisher_removes_the_record():
    cache = Cache()
    publish(cache, "q.x", b"v", T.INITIAL)
    publish(cache, "q.x", b"", T.INITIAL, S.NOT_FOUND)
    assert answer_of(cache, "q.x") == (T.INITIAL, S.NOT_FOUND, b"")
    assert cache.bytes == 0


@pytest.mark.parametrize("status", [S.TEMP_UNAVAIL, S.BAD_ACCESS, S.BAD_NAME, S.STALE, S.CONFLATED, S.FEED_DOWN,
                                    S.FEED_SWITCH, S.PERM_DENIED])
def test_initial_with_status_is_kept_and_answered(status):
    cache = Cache()
    publish(cache, "q.x", b"v", T.INITIAL, status)
    assert answer_of(cache, "q.x") == (T.INITIAL, status, b"v")


def test_initial_clears_stale():
    cache = Cache()
    publish(cache, "q.x", b"v1", T.UPDATE, S.STALE)
    publish(cache, "q.x", b"v2", T.INITIAL)
    assert answer_of(cache, "q.x") == (T.INITIAL, S.OK, b"v2")


# ---------------------------------------------------------------- drop

def test_drop_nosubscribers_keeps_the_record():
    cache = Cache()
    publish(cache, "q.x", b"v", T.INITIAL)
    assert publish(cache, "q.x", b"", T.DROP, S.NOSUBSCRIBERS) == []
    assert answer_of(cache, "q.x") == (T.INITIAL, S.OK, b"v")


def test_drop_nosubscribers_is_published_when_the_last_subscriber_stops():
    cache = Cache()
    start(cache, "q.x", session="a.n1", initial=False)
    start(cache, "q.x", session="b.n2", initial=False)
    assert cache.receive(Envelope("_SUB.STOP.q.x", session="a.n1", seqno=2), 0.0) == []
    (drop,) = cache.receive(Envelope("_SUB.STOP.q.x", session="b.n2", seqno=2), 0.0)
    assert (drop.subject, drop.type, drop.status) == ("q.x", T.DROP, S.NOSUBSCRIBERS)


def test_drop_expired_removes_the_record():
    cache = Cache()
    publish(cache, "q.x", b"v", T.INITIAL)
    publish(cache, "q.x", b"", T.DROP, S.EXPIRED)
    assert snap(cache, "q.x").status == S.NOT_FOUND
    assert not cache.records and cache.bytes == 0


def test_drop_relocate_moves_the_value_and_redirects_the_old_subject():
    cache = Cache()
    publish(cache, "NASDAQ.INTC", b'{"p":1}', T.INITIAL, S.STALE)
    publish(cache, "NASDAQ.INTC", b"NASDAQ.MSFT", T.DROP, S.RELOCATE)
    assert answer_of(cache, "NASDAQ.INTC") == (T.DROP, S.RELOCATE, b"NASDAQ.MSFT")
    assert answer_of(cache, "NASDAQ.MSFT") == (T.INITIAL, S.STALE, b'{"p":1}')
    publish(cache, "NASDAQ.INTC", b"new", T.INITIAL)  # new data under the old name ends the redirect
    assert answer_of(cache, "NASDAQ.INTC") == (T.INITIAL, S.OK, b"new")


@pytest.mark.parametrize("target", [b"", b"a..b", b"a.*", b"\xff", b"_INBOX.x", b"q.x"])
def test_drop_relocate_to_a_bad_subject_is_refused_and_counted(target):
    cache = Cache()
    publish(cache, "q.x", b"v", T.INITIAL)
    publish(cache, "q.x", target, T.DROP, S.RELOCATE)
    assert cache.stats["bad relocations"] == 1
    assert answer_of(cache, "q.x") == (T.INITIAL, S.OK, b"v")


def test_drop_preempted_is_published_on_eviction_and_ignored_when_received():
    cache = Cache(max_bytes=3 * (RECORD_OVERHEAD + 3 + 10))
    for index in range(3):
        assert publish(cache, f"q.{index}", b"0123456789") == []
    snap(cache, "q.0")  # a read makes q.0 recently used, so q.1 is the oldest
    (drop,) = publish(cache, "q.3", b"0123456789")
    assert (drop.subject, drop.type, drop.status) == ("q.1", T.DROP, S.PREEMPTED)
    assert snap(cache, "q.1").status == S.NOT_FOUND
    assert publish(cache, "q.0", b"", T.DROP, S.PREEMPTED) == []  # another cache's eviction
    assert snap(cache, "q.0").status == S.OK


# ---------------------------------------------------------------- update

def test_update_ok_merges_json_objects_and_creates_missing_records():
    cache = Cache()
    publish(cache, "q.x", b'{"bid":1,"ask":2}')
    publish(cache, "q.x", b'{"ask":3,"last":{"px":9}}')
    status, data = answer_of(cache, "q.x")[1:]
    assert status == S.OK and json.loads(data) == {"bid": 1, "ask": 3, "last": {"px": 9}}


def test_update_of_non_json_replaces():
    cache = Cache()
    publish(cache, "q.x", b"first")
    publish(cache, "q.x", b"second")
    assert answer_of(cache, "q.x") == (T.INITIAL, S.OK, b"second")


@pytest.mark.parametrize("sticky", sorted(STICKY))
def test_update_sticky_status_persists_until_initial_or_verify(sticky):
    cache = Cache()
    publish(cache, "q.x", b'{"a":1}', T.INITIAL)
    publish(cache, "q.x", b'{"b":2}', T.UPDATE, sticky)
    publish(cache, "q.x", b'{"c":3}', T.UPDATE, S.OK)  # applied and forwarded, but still not trustworthy
    kind, status, data = answer_of(cache, "q.x")
    assert (kind, status) == (T.INITIAL, sticky) and json.loads(data) == {"a": 1, "b": 2, "c": 3}
    publish(cache, "q.x", b'{"a":null}', T.VERIFY, S.OK)  # verify clears the status, and null clears a field
    kind, status, data = answer_of(cache, "q.x")
    assert status == S.OK and json.loads(data) == {"b": 2, "c": 3}


def test_update_conflated_marks_merged_updates_until_the_next_plain_update():
    cache = Cache()
    publish(cache, "q.x", b'{"a":1}', T.INITIAL)
    publish(cache, "q.x", b'{"a":5}', T.UPDATE, S.CONFLATED)
    assert answer_of(cache, "q.x")[:2] == (T.INITIAL, S.CONFLATED)
    publish(cache, "q.x", b'{"a":6}')
    assert answer_of(cache, "q.x") == (T.INITIAL, S.OK, b'{"a":6}')


def test_transient_changes_the_status_without_data():
    cache = Cache()
    publish(cache, "q.x", b"v", T.INITIAL)
    publish(cache, "q.x", b"ignored", T.TRANSIENT, S.FEED_DOWN)
    assert answer_of(cache, "q.x") == (T.INITIAL, S.FEED_DOWN, b"v")


# ---------------------------------------------------------------- verify

def test_verify_ok_clears_stale_and_merges():
    cache = Cache()
    publish(cache, "q.x", b'{"a":1}', T.INITIAL, S.STALE)
    publish(cache, "q.x", b'{"b":2}', T.VERIFY, S.OK)
    kind, status, data = answer_of(cache, "q.x")
    assert status == S.OK and json.loads(data) == {"a": 1, "b": 2}


# ---------------------------------------------------------------- other inputs

@pytest.mark.parametrize("kind,status", [(T.UPDATE, S.NOT_FOUND), (T.UPDATE, S.ACK), (T.INITIAL, S.EXPIRED)])
def test_statuses_a_record_cannot_hold_are_refused_and_counted(kind, status):
    cache = Cache()
    publish(cache, "q.x", b"v", T.INITIAL)
    publish(cache, "q.x", b"other", kind, status)
    assert cache.stats["bad status"] == 1
    assert answer_of(cache, "q.x") == (T.INITIAL, S.OK, b"v")


@pytest.mark.parametrize("envelope", [
    Envelope("_SNAP.q.x"),                               # nowhere to answer
    Envelope("_SNAP.q.x", reply="q.y"),                  # not an inbox: would overwrite q.y
    Envelope("_SNAP._INBOX.x", reply=INBOX),             # control subjects are not cached
    Envelope("_SUB.START.q.x", b"[1]", reply=INBOX),     # request data must be a JSON object
    Envelope("_SUB.START.q.x", b'{"ack":"yes"}', reply=INBOX),
    Envelope("_SUB.STOP.q.x", b"{", reply=INBOX),
    Envelope("q.x", b"v", T.SNAP),                       # an answer type on a data subject
])
def test_bad_requests_get_no_answer(envelope):
    cache = Cache()
    publish(cache, "q.y", b"v", T.INITIAL)
    assert cache.receive(envelope, 0.0) == []
    assert cache.get("q.y").data == b"v"
    assert sum(cache.stats.values()) >= 2  # the initial and a counted refusal


def test_answer_too_large_for_a_datagram_becomes_temp_unavail():
    cache = Cache()
    publish(cache, "q.x", bytes(65_400), T.INITIAL)
    long_inbox = "_INBOX." + "i" * 900
    (answer,) = cache.receive(Envelope("_SNAP.q.x", reply=long_inbox), 0.0)
    assert (answer.type, answer.status, answer.data) == (T.INITIAL, S.TEMP_UNAVAIL, b"")


def test_a_loss_in_the_stream_makes_every_record_stale():
    cache = Cache()
    publish(cache, "q.a", b"a", T.INITIAL)
    publish(cache, "q.b", b"b", T.INITIAL, S.FEED_DOWN)
    cache.lost()
    assert answer_of(cache, "q.a") == (T.INITIAL, S.STALE, b"a")
    assert answer_of(cache, "q.b") == (T.INITIAL, S.FEED_DOWN, b"b")  # already sticky: kept


def test_sessions_expire_subscriptions_and_publish_nosubscribers():
    cache = Cache(sessions=SessionTable(default_interval=1.0))
    cache.receive(Envelope("_SESSION.HELLO", b'{"time":1,"interval":0.5,"cnonce":"c"}', session="sam.n1",
                           seqno=1), 0.0)
    start(cache, "q.x", now=0.0, initial=False)
    assert cache.poll(1.4) == []                         # within 3 intervals of the HELLO
    cache.receive(Envelope("_SESSION.HB", b'{"time":2,"interval":0.5,"cnonce":"d"}', session="sam.n1",
                           seqno=3), 1.4)
    assert cache.poll(2.8) == []                         # the heartbeat kept it
    (drop,) = cache.poll(3.0)
    assert (drop.subject, drop.type, drop.status) == ("q.x", T.DROP, S.NOSUBSCRIBERS)
    assert cache.sessions.subscribers("q.x") == frozenset()


def test_bye_drops_the_sessions_subscriptions():
    cache = Cache()
    start(cache, "q.x", initial=False)
    start(cache, "q.y", initial=False)
    drops = cache.receive(Envelope("_SESSION.BYE", session="sam.n1", seqno=9), 0.0)
    assert sorted(d.subject for d in drops) == ["q.x", "q.y"]


# ---------------------------------------------------------------- properties

updates = st.lists(st.tuples(st.sampled_from(["a.b", "a.c", "d", "e.f.g", "h"]), st.binary(max_size=300),
                             st.sampled_from(list(T)), st.sampled_from(list(S))), max_size=60)


@settings(max_examples=150)
@given(updates, st.integers(min_value=1, max_value=4000))
def test_memory_stays_bounded_and_accounted(sequence, max_bytes):
    cache = Cache(max_bytes=max_bytes)
    published = set()
    for subject, data, kind, status in sequence:
        for out in publish(cache, subject, data, kind, status):
            assert (out.type, out.status) == (T.DROP, S.PREEMPTED)
            published.add(out.subject)
        assert cache.bytes <= max_bytes
        assert cache.bytes == sum(record.size for record in cache.records.values())


json_values = st.recursive(st.none() | st.booleans() | st.integers(-10, 10) | st.text(max_size=3),
                           lambda inner: st.dictionaries(st.text(max_size=2), inner, max_size=3), max_leaves=10)
objects = st.dictionaries(st.text(max_size=2), json_values, max_size=4)


@given(objects, objects)
def test_merge_follows_rfc7396(target, patch):
    merged = json.loads(merge(json.dumps(target).encode(), json.dumps(patch).encode()))
    assert merged == merge_patch(target, patch)
    for name, value in patch.items():
        if value is None:
            assert name not in merged
        elif not isinstance(value, dict):
            assert merged[name] == value
    for name in set(target) - set(patch):
        assert merged[name] == target[name]


def test_merge_patch_examples_from_rfc7396_appendix_a():
    assert merge_patch({"a": "b"}, {"a": "c"}) == {"a": "c"}
    assert merge_patch({"a": "b"}, {"b": "c"}) == {"a": "b", "b": "c"}
    assert merge_patch({"a": "b"}, {"a": None}) == {}
    assert merge_patch({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}) == {"a": {"b": "d"}}
    assert merge_patch({"a": [{"b": "c"}]}, {"a": [1]}) == {"a": [1]}
    assert merge_patch([1, 2], {"a": "b", "c": None}) == {"a": "b"}
    assert merge_patch({"e": None}, {"a": 1}) == {"e": None, "a": 1}


def test_deeply_nested_update_replaces_instead_of_crashing():
    deep = b'{"a":' * 1000 + b"1" + b"}" * 1000
    assert merge(b'{"a":{}}', deep) == deep


def test_an_update_nested_deeper_than_orjson_writes_replaces_the_record():
    """orjson reads deeper nesting than it writes back (and than a compiled merge recurses into): the update
    replaces the record then, instead of escaping as orjson's TypeError."""
    deep = b'{"a":' * 300 + b"1" + b"}" * 300
    assert merge(b'{"a":{}}', deep) == deep
    assert merge_many(b'{"a":{}}', [deep]) == deep
    assert merge_many(b'{"a":{}}', [b'{"b":2}', deep]) == merge(merge(b'{"a":{}}', b'{"b":2}'), deep) == deep
