"""Pending updates: the cache fed raw payloads leaves the same records, statuses, order, sizes and answers as
one envelope at a time, whatever the batches, the memory bound and the mix of messages."""
from __future__ import annotations

from unittest import mock

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from fyrehose.cache import core
from fyrehose.cache.core import MAX_PENDING, RECORD_STATUSES, Cache
from fyrehose.envelope import Envelope, MsgType, Status, decode, encode
from fyrehose.sessions import StartOptions
from fyrehose.snapshots import WITH_SEQUENCE

INBOX = "_INBOX.sam.n1.1"
SUBJECTS = ["a.b", "a.c", "q.x", "q.y"]
LOST = object()  # a loss in the stream

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.sampled_from([1e15, 1.5]) | st.text(max_size=3),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from("abcd"), inner, max_size=3),
    max_leaves=8)
data_values = st.one_of(
    st.dictionaries(st.sampled_from("abcd"), st.integers(0, 99) | st.text(max_size=4), max_size=4).map(orjson.dumps),
    st.dictionaries(st.sampled_from("abcd"), json_values, max_size=4).map(orjson.dumps),  # nested, null: merged
    json_values.map(orjson.dumps),
    st.sampled_from([b"", b"plain", b"{not json", b"[1,2]", b"{}", b'{"a":null}', b'{"a":1e9}', b"x" * 300]),
)
statuses = st.sampled_from(sorted(RECORD_STATUSES) + [Status.NOT_FOUND, Status.EXPIRED])
kinds = st.sampled_from([MsgType.UPDATE] * 8 + [MsgType.INITIAL, MsgType.VERIFY, MsgType.TRANSIENT, MsgType.DROP])


@st.composite
def messages(draw):
    """A payload of the stream: mostly plain updates, and every other kind of message among them."""
    choice = draw(st.integers(0, 29))
    subject = draw(st.sampled_from(SUBJECTS))
    if choice == 0:
        return LOST
    if choice == 1:
        return draw(st.sampled_from([b"raw payload", b"\xfb\x1e\x01\x00", b"\xfb\x1e\x01\x00\x00\x00\x00\x09a.b"]))
    if choice in (2, 3):
        data = draw(st.sampled_from([b"", WITH_SEQUENCE]))
        return encode(Envelope("_SNAP." + subject, data, reply=INBOX))
    if choice == 4:
        return encode(Envelope("_SUB.START." + subject, StartOptions(initial=True).encode(), reply=INBOX,
                               session="sam.n1", seqno=1))
    kind = draw(kinds)
    status = draw(statuses)
    data = draw(data_values)
    if kind == MsgType.DROP:
        status = draw(st.sampled_from([Status.EXPIRED, Status.RELOCATE, Status.NOSUBSCRIBERS]))
        data = draw(st.sampled_from(SUBJECTS + ["_x.y"])).encode() if status == Status.RELOCATE else b""
    elif kind == MsgType.UPDATE and draw(st.booleans()):
        status = Status.OK
    extra = draw(st.sampled_from([{}] * 6 + [{"session": "pub.n2", "seqno": 7}, {"digest": b"d" * 8},
                                             {"reply": INBOX}, {"headers": b"h"}]))
    if choice == 5:
        subject = "_private.x"
    return encode(Envelope(subject, data, kind, status, **extra))


def eager(stream, max_bytes):
    """The reference: every envelope decoded and applied at once."""
    cache = Cache(max_bytes)
    answers = []
    for seq, payload in enumerate(stream, 1):
        if payload is LOST:
            cache.lost()
            continue
        opened = decode(payload)
        if opened is not None:
            answers += cache.receive(opened, 0.0, seq)
    return cache, answers


def lazy(stream, max_bytes, cuts):
    cache = Cache(max_bytes)
    answers = []
    numbered = list(enumerate(stream, 1))
    for start, end in zip([0] + cuts, cuts + [len(stream)]):
        batch = []
        for seq, payload in numbered[start:end]:
            if payload is LOST:
                answers += cache.receive_messages(batch, 0.0)
                batch = []
                cache.lost()
            else:
                batch.append((seq, payload))
        answers += cache.receive_messages(batch, 0.0)
    return cache, answers


def state(cache):
    cache.settle()
    return [(s, r.data, r.status, r.relocated_to, r.seq, r.size) for s, r in cache.records.items()], cache.bytes


@settings(max_examples=400)
@given(st.lists(messages(), max_size=60), st.sampled_from([64 << 20, 1500, 3000, 8000]),
       st.sampled_from([(MAX_PENDING, core.MAX_PENDING_UPDATES), (3, 4), (2, 1)]), st.data())
def test_raw_payloads_leave_the_same_records_and_answers_as_one_envelope_at_a_time(stream, max_bytes, limits, data):
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=3)))
    reference, expected = eager(stream, max_bytes)
    with mock.patch.multiple(core, MAX_PENDING=limits[0], MAX_PENDING_UPDATES=limits[1]):  # folds at any point
        cache, answers = lazy(stream, max_bytes, cuts)
    assert answers == expected
    assert state(cache) == state(reference)


def plain_updates(count, subject="p.a"):
    return [(seq, encode(Envelope(subject, orjson.dumps({"n": seq, f"k{seq % 3}": seq})))) for seq in range(1, count + 1)]


def test_plain_updates_wait_unread_until_a_snapshot_reads_them():
    cache = Cache()
    cache.receive_messages(plain_updates(100), 0.0)
    assert len(cache.records["p.a"].pending) == 99  # the first one showed the subject's header; the rest wait
    answer, = cache.receive_messages([(101, encode(Envelope("_SNAP.p.a", reply=INBOX)))], 0.0)
    assert orjson.loads(answer.data) == {"n": 100, "k0": 99, "k1": 100, "k2": 98} and answer.status == Status.OK
    assert cache.records["p.a"].pending is None and cache.records["p.a"].seq == 100


def test_an_initial_discards_the_pending_updates_unread():
    cache = Cache()
    cache.receive_messages(plain_updates(10), 0.0)
    cache.receive_messages([(11, encode(Envelope("p.a", b'{"fresh":1}', MsgType.INITIAL, Status.STALE)))], 0.0)
    assert cache.stats["conflated updates"] == 0 and cache.pending_bytes == 0
    record = cache.get("p.a")
    assert (record.data, record.status, record.seq) == (b'{"fresh":1}', Status.STALE, 11)


def test_pending_updates_of_a_record_are_bounded():
    cache = Cache()
    cache.receive_messages(plain_updates(3 * MAX_PENDING), 0.0)
    assert 0 < len(cache.records["p.a"].pending) < MAX_PENDING
    assert orjson.loads(cache.get("p.a").data)["n"] == 3 * MAX_PENDING


def test_near_the_memory_bound_nothing_is_pending_and_evictions_come_in_order():
    stream = [payload for i in range(6) for _, payload in plain_updates(3, f"p.{i}")]
    cache = Cache(max_bytes=1000)
    answers = cache.receive_messages(list(enumerate(stream, 1)), 0.0)
    assert not cache.records["p.5"].pending and cache.bytes <= 1000
    assert [(a.subject, a.status) for a in answers] == [(f"p.{i}", Status.PREEMPTED) for i in range(3)]
    assert answers == eager(stream, 1000)[1]


def test_past_the_bound_on_all_pending_updates_the_longest_pending_record_is_folded():
    stream = [(seq, encode(Envelope(f"p.{seq % 20}", orjson.dumps({"n": seq})))) for seq in range(1, 201)]
    cache = Cache()
    with mock.patch.object(core, "MAX_PENDING_UPDATES", 10):
        for message in stream:
            cache.receive_messages([message], 0.0)
            assert cache.pending_updates <= 10  # folded a record at a time as the bound is passed, never in bursts
            assert cache.pending_updates == sum(len(r.pending or []) for r in cache.records.values())
    assert cache.pending_updates and all(orjson.loads(cache.get(f"p.{i % 20}").data) == {"n": i} for i in range(181, 201))


def test_envelopes_applied_directly_between_raw_batches_evict_by_what_the_records_hold():
    stream = [payload for i in range(4) for _, payload in plain_updates(3, f"p.{i}")]
    bigger = encode(Envelope("p.9", b"x" * 18_700, MsgType.INITIAL))
    reference, expected = eager(stream + [bigger], 20_000)
    cache = Cache(20_000)
    answers = cache.receive_messages(list(enumerate(stream, 1)), 0.0)
    assert cache.pending_updates == 8  # all but the first of each subject
    answers += cache.receive(decode(bigger), 0.0, len(stream) + 1)  # not through receive_messages: no room check
    assert answers == expected and state(cache) == state(reference)
    assert [a.subject for a in answers] == ["p.0"]
