"""Conflation in the cache: a batch gives the same records, statuses, order and answers as one by one."""
from __future__ import annotations

import functools

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from fyrehose.cache.core import RECORD_STATUSES, Cache
from fyrehose.cache.merge import merge, merge_many
from fyrehose.subjects.envelope import Envelope, MsgType, Status
from fyrehose.subjects.snapshots import WITH_SEQUENCE

INBOX = "_INBOX.sam.n1.1"
SUBJECTS = ["a.b", "a.c", "q.x"]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.text(max_size=3),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from("abcd"), inner, max_size=3),
    max_leaves=8)
payloads = st.one_of(
    json_values.map(orjson.dumps),
    st.dictionaries(st.sampled_from("abcd"), json_values, max_size=4).map(orjson.dumps),  # objects: merged
    st.sampled_from([b"", b"plain", b"{not json", b"[1,2]", b"{}", b'{"a":null}']),
)


@given(payloads, st.lists(payloads, max_size=8))
def test_merging_many_is_merging_one_by_one(record, updates):
    assert merge_many(record, updates) == functools.reduce(merge, updates, record)


def test_updates_before_a_replacement_are_not_decoded():
    assert merge_many(b'{"a":1}', [b"{broken", b'{"b":2}', b"plain", b'{"c":3}']) == b'{"c":3}'
    assert merge_many(b'{"a":1}', [b'{"b":2}', b'{"a":null}']) == b'{"b":2}'


def test_patches_invalid_one_by_one_are_not_merged_because_their_join_is_valid_json():
    """Flat patches are decoded together as one JSON array: these parse that way, but not each on its own."""
    record = b'{"x":1}'
    for patches in ([b'{"a":"}', b'{","b":2}'],  # one object holding "},{" instead of two
                    [b'{}, "', b'{"'],  # an object and a string instead of two objects
                    [b'{"a":"}', b'{","b":2}', b'{"c":3}'],
                    [b'{"a":1}', b'{"b":"}', b'{","c":3}', b'{"d":4}'],
                    [b'{"a":1} ', b'{"b":2}\n']):  # trailing whitespace is still an object on its own
        assert merge_many(record, patches) == functools.reduce(merge, patches, record), patches


flat_values = st.integers(-5, 5) | st.text(alphabet='{},":[] a1\\', max_size=4)


@given(st.lists(st.dictionaries(st.sampled_from(["a", "b", "{", "},{"]), flat_values, max_size=3), min_size=1,
                max_size=5), st.data())
def test_patches_cut_anywhere_between_braces_merge_as_one_by_one(objects, data):
    """Valid objects joined, then cut at any "," before a "{", inside strings too: the pieces merge as one by one."""
    text = b",".join(map(orjson.dumps, objects))
    places = [i for i in range(len(text) - 1) if text[i:i + 2] == b",{"]
    cuts = sorted(data.draw(st.sets(st.sampled_from(places)))) if places else []
    patches = [text[start:end] for start, end in zip([0] + [cut + 1 for cut in cuts], cuts + [len(text)])]
    record = data.draw(st.sampled_from([b'{"a":0}', b"plain", b"{}"]))
    assert merge_many(record, patches) == functools.reduce(merge, patches, record)


statuses = st.sampled_from(sorted(RECORD_STATUSES) + [Status.NOT_FOUND, Status.EXPIRED])
kinds = st.sampled_from([MsgType.UPDATE] * 6 + [MsgType.INITIAL, MsgType.VERIFY, MsgType.TRANSIENT, MsgType.DROP])


@st.composite
def envelopes(draw):
    if draw(st.integers(0, 9)) == 0:  # a request between updates
        data = draw(st.sampled_from([b"", WITH_SEQUENCE]))  # answers with and without the record's sequence
        return Envelope("_SNAP." + draw(st.sampled_from(SUBJECTS)), data, reply=INBOX, type=MsgType.UPDATE)
    kind = draw(kinds)
    status = draw(statuses)
    data = draw(payloads)
    if kind == MsgType.DROP:
        status = draw(st.sampled_from([Status.EXPIRED, Status.RELOCATE, Status.NOSUBSCRIBERS]))
        data = draw(st.sampled_from(SUBJECTS)).encode() if status == Status.RELOCATE else b""
    elif kind == MsgType.UPDATE and draw(st.booleans()):
        status = Status.OK
    return Envelope(draw(st.sampled_from(SUBJECTS)), data, kind, status)


def state(cache):
    return [(s, r.data, r.status, r.relocated_to, r.seq) for s, r in cache.records.items()], cache.bytes


@settings(max_examples=300)
@given(st.lists(envelopes(), max_size=40), st.data())
def test_a_conflated_batch_leaves_the_same_records_and_answers_as_one_by_one(stream, data):
    one_by_one, batched = Cache(), Cache()
    seqs = list(range(100, 100 + len(stream)))  # each record keeps the sequence of its last update
    answers_one = [a for envelope, seq in zip(stream, seqs) for a in one_by_one.receive(envelope, 0.0, seq)]
    cut = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=3)))
    answers_batched = []
    for start, end in zip([0] + cut, cut + [len(stream)]):  # any batch boundaries give the same
        answers_batched += batched.receive_many(stream[start:end], 0.0, seqs[start:end])
    assert state(batched) == state(one_by_one)
    assert answers_batched == answers_one


def test_several_updates_of_a_subject_in_one_batch_are_stored_once():
    cache = Cache()
    stream = [Envelope(f"p.{i % 3}", orjson.dumps({"n": i, f"k{i % 2}": i})) for i in range(30)]
    stream.insert(15, Envelope("_SNAP.p.0", reply=INBOX))
    answers = cache.receive_many(stream, 0.0)
    assert [orjson.loads(a.data)["n"] for a in answers] == [12]  # the snapshot saw exactly what came before it
    assert cache.stats["updates"] == 30 and cache.stats["conflated updates"] == 30 - 6
    assert {s: orjson.loads(r.data) for s, r in cache.records.items()} == {
        "p.0": {"n": 27, "k0": 24, "k1": 27}, "p.1": {"n": 28, "k0": 28, "k1": 25}, "p.2": {"n": 29, "k0": 26, "k1": 29}}
    assert list(cache.records) == ["p.0", "p.1", "p.2"]  # in the order of their last update, as one by one
