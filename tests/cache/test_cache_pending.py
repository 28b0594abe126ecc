"""Pending updates: the cache fed raw payloads leaves the same records, statuses, order, sizes and answers as
one envelope at a time, whatever the batches, the memory bound and the mix of messages."""
from __future__ import annotations

from unittest import mock

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from fyrehose.cache import core
from fyrehose.cache.core import MAX_PENDING, RECORD_STATUSES, Cache
from fyrehose.subjects.envelope import Envelope, MsgType, Status, decode, encode
from fyrehose.subjects.session_table import StartOptions
from fyrehose.subjects.snapshots import WITH_SEQUENCE

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


@st.composite
def plain_bursts(draw):
    """Plain updates one after another, as a datagram of a busy stream brings them (a few statuses, so that
    header prefixes repeat)."""
    return [encode(Envelope(draw(st.sampled_from(SUBJECTS)), draw(data_values), MsgType.UPDATE,
                            draw(st.sampled_from([Status.OK] * 4 + [Status.STALE, Status.CONFLATED]))))
            for _ in range(draw(st.integers(2, 8)))]


streams = st.lists(messages().map(lambda message: [message]) | plain_bursts(), max_size=25).map(
    lambda parts: [message for part in parts for message in part])


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


def lazy(stream, max_bytes, cuts, runs=()):
    """The stream in batches cut at ``cuts`` (and at losses), a batch given as a run when ``runs`` says so."""
    cache = Cache(max_bytes)
    answers = []
    numbered = list(enumerate(stream, 1))
    batches = iter(runs)

    def receive(batch):
        if batch and next(batches, False):  # consecutive sequences: a datagram's run
            return cache.receive_run(batch[0][0], [payload for _, payload in batch], 0.0)
        return cache.receive_messages(batch, 0.0)

    for start, end in zip([0] + cuts, cuts + [len(stream)]):
        batch = []
        for seq, payload in numbered[start:end]:
            if payload is LOST:
                answers += receive(batch)
                batch = []
                cache.lost()
            else:
                batch.append((seq, payload))
        answers += receive(batch)
    return cache, answers


def state(cache):
    cache.settle()
    return [(s, r.data, r.status, r.relocated_to, r.seq, r.size) for s, r in cache.records.items()], cache.bytes


bounds = st.sampled_from([64 << 20, 1000, 1500, 3000, 8000, 20_000])  # near the bound, little or nothing is pending
limits = st.sampled_from([(MAX_PENDING, core.MAX_PENDING_UPDATES), (3, 4), (2, 1)])  # folds at any point


def check_lazy_is_eager(stream, max_bytes, limits, cuts, runs):
    reference, expected = eager(stream, max_bytes)
    with mock.patch.multiple(core, MAX_PENDING=limits[0], MAX_PENDING_UPDATES=limits[1]):
        cache, answers = lazy(stream, max_bytes, cuts, runs)
    assert answers == expected
    assert state(cache) == state(reference)


@settings(max_examples=500)
@given(streams, bounds, limits, st.data())
def test_raw_payloads_leave_the_same_records_and_answers_as_one_envelope_at_a_time(stream, max_bytes, limits, data):
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=6)))
    runs = data.draw(st.lists(st.booleans(), min_size=12, max_size=12))  # which batches come as runs
    check_lazy_is_eager(stream, max_bytes, limits, cuts, runs)


@settings(max_examples=300)
@given(st.lists(plain_bursts() | plain_bursts() | messages().map(lambda message: [message]), max_size=10).map(
    lambda parts: [message for part in parts for message in part]), bounds, limits, st.data())
def test_runs_of_mostly_plain_updates_leave_the_same_records_and_answers_as_one_at_a_time(stream, max_bytes, limits,
                                                                                         data):
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), min_size=1, max_size=8)))  # runs learn prefixes
    check_lazy_is_eager(stream, max_bytes, limits, cuts, [True] * (len(stream) + 3))


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


def test_a_run_of_known_subjects_moves_records_by_their_last_update_and_keeps_its_sequence():
    cache = Cache()
    cache.receive_messages(list(enumerate((payload for i in range(4) for _, payload in plain_updates(1, f"p.{i}")),
                                          1)), 0.0)
    order = [2, 0, 3, 2, 0, 2, 1, 0]  # last updates: p.3 at 12, p.2 at 15, p.1 at 16, p.0 at 17
    run = [encode(Envelope(f"p.{i}", orjson.dumps({"i": i, "at": seq}))) for seq, i in enumerate(order, 10)]
    assert cache.receive_run(10, run, 0.0) == []
    assert cache.pending_updates == 8 and cache.stats["updates"] == 4 + 8
    assert list(cache.records) == ["p.3", "p.2", "p.1", "p.0"]
    assert [cache.records[f"p.{i}"].seq for i in range(4)] == [17, 16, 15, 12]
    assert [orjson.loads(cache.get(f"p.{i}").data)["at"] for i in range(4)] == [17, 16, 15, 12]


def test_a_run_takes_known_stretches_at_once_and_the_rest_one_by_one():
    cache = Cache()
    update = plain_updates(1, "p.a")[0][1]
    cache.receive_messages([(1, update)], 0.0)
    run = [update, encode(Envelope("p.new", b'{"n":1}')), b"raw", encode(Envelope("p.new", b'{"n":2}')),
           encode(Envelope("_SNAP.p.new", reply=INBOX)), update,
           encode(Envelope("p.a", b"p.b", MsgType.DROP, Status.RELOCATE))]
    with mock.patch.object(cache, "_take_plain_run", wraps=cache._take_plain_run) as bulk:
        answers = cache.receive_run(2, run, 0.0)
    assert [call.args[:2] for call in bulk.call_args_list] == [(2, ["p.a"]), (7, ["p.a"])]
    assert [(a.subject, a.data, a.status) for a in answers] == [(INBOX, b'{"n":2}', Status.OK)]
    assert list(cache.records) == ["p.new", "p.b", "p.a"]
    assert [(cache.records[s].seq, cache.records[s].relocated_to) for s in ("p.new", "p.b", "p.a")] == \
        [(5, None), (8, None), (8, "p.b")]


def test_a_run_lets_a_record_pass_max_pending_then_folds_it():
    cache = Cache()
    cache.receive_messages(plain_updates(1), 0.0)  # applied at once: the header prefix is learned
    run = [payload for _, payload in plain_updates(MAX_PENDING + 10)][1:]
    cache.receive_run(2, run, 0.0)
    assert cache.stats["conflated updates"] == MAX_PENDING + 8  # all MAX_PENDING + 9 folded together after the run
    assert cache.pending_updates == 0 and cache.records["p.a"].pending is None
    assert orjson.loads(cache.records["p.a"].data)["n"] == MAX_PENDING + 10
    assert cache.records["p.a"].seq == MAX_PENDING + 10


def test_a_run_that_does_not_fit_the_lazy_room_is_taken_one_by_one_evicting_as_then():
    first = [encode(Envelope(f"p.{i}", b'{"n":0}')) for i in range(6)]  # records of 266 bytes: 3 fit in 1000
    run = [encode(Envelope(f"p.{i}", b'{"n":1}')) for i in range(3)]  # known prefixes, evicted records
    reference, expected = eager(first + run, 1000)
    cache = Cache(max_bytes=1000)
    answers = cache.receive_messages(list(enumerate(first, 1)), 0.0)
    answers += cache.receive_run(len(first) + 1, run, 0.0)
    assert answers == expected and state(cache) == state(reference)
    assert [a.subject for a in expected[-3:]] == ["p.3", "p.4", "p.5"]  # evicted by the run's updates
