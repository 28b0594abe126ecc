"""The compiled cache core and merge answer every stream as their .py files do (tests/oracle.py)."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fyrehose.subjects.envelope import Envelope, MsgType, Status, decode, encode

from oracle import plain, same, twins

EXAMPLES = settings(max_examples=200, deadline=None)
INBOX = "_INBOX.tester.1"


@pytest.fixture(scope="module")
def cores():
    return twins("fyrehose.cache.core")


@pytest.fixture(scope="module")
def merges():
    return twins("fyrehose.cache.merge")


json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.text(max_size=3)),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.sampled_from("abc"), inner, max_size=3)),
    max_leaves=8)
documents = st.one_of(json_values.map(lambda value: __import__("orjson").dumps(value)),
                      st.sampled_from([b"", b"{", b"not json", b'{"a":1', b"{}", b'{"a":null}']),
                      st.binary(max_size=6))


@EXAMPLES
@given(record=documents, updates=st.lists(documents, max_size=6), target=json_values, patch=json_values)
def test_merging_agrees(merges, record, updates, target, patch):
    built, source = merges
    same(lambda: built.merge_patch(target, patch), lambda: source.merge_patch(target, patch))
    for update in updates:
        same(lambda update=update: built.merge(record, update), lambda update=update: source.merge(record, update))
    same(lambda: built.merge_many(record, updates), lambda: source.merge_many(record, updates))


subjects = st.sampled_from(["p.a", "p.b", "p.c.d", "_INBOX.x", "p.*"])


@st.composite
def streams(draw):
    """Payloads of a stream: updates (plain or not), snapshots, subscription starts and stops, raw bytes."""
    payloads = []
    for _ in range(draw(st.integers(1, 25))):
        kind = draw(st.sampled_from(["update", "update", "update", "snap", "start", "stop", "raw", "status"]))
        subject = draw(subjects).replace("*", "x")
        data = draw(documents)
        if kind == "update":
            payloads.append(encode(Envelope(subject, data)))
        elif kind == "status":
            payloads.append(encode(Envelope(subject, data, draw(st.sampled_from(list(MsgType))),
                                            draw(st.sampled_from(list(Status))))))
        elif kind == "snap":
            payloads.append(encode(Envelope("_SNAP." + subject, reply=INBOX)))
        elif kind in ("start", "stop"):
            payloads.append(encode(Envelope(f"_SUB.{kind.upper()}." + subject, reply=INBOX, session="tester.1",
                                            seqno=draw(st.integers(0, 9)))))
        else:
            payloads.append(data)
    return payloads


def _records(cache) -> list:
    cache.settle()
    return [(subject, plain(record)) for subject, record in cache.records.items()]


@EXAMPLES
@given(payloads=streams(), way=st.sampled_from(["run", "messages", "envelopes", "one by one"]),
       max_bytes=st.sampled_from([64, 1 << 20]))
def test_the_cache_core_agrees(cores, payloads, way, max_bytes):
    built, source = cores
    caches = [built.Cache(max_bytes), source.Cache(max_bytes)]
    opened = [envelope for envelope in map(decode, payloads) if envelope is not None]
    if way == "run":
        same(lambda: caches[0].receive_run(1, payloads, 0.0), lambda: caches[1].receive_run(1, payloads, 0.0))
    elif way == "messages":
        messages = list(enumerate(payloads, start=1))
        same(lambda: caches[0].receive_messages(messages, 0.0), lambda: caches[1].receive_messages(messages, 0.0))
    elif way == "envelopes":
        seqs = list(range(1, len(opened) + 1))
        same(lambda: caches[0].receive_many(opened, 0.0, seqs), lambda: caches[1].receive_many(opened, 0.0, seqs))
    else:
        for seq, envelope in enumerate(opened, start=1):
            same(lambda seq=seq, envelope=envelope: caches[0].receive(envelope, 0.0, seq),
                 lambda seq=seq, envelope=envelope: caches[1].receive(envelope, 0.0, seq))
    for subject in ("p.a", "p.b", "p.c.d"):
        same(lambda subject=subject: caches[0].get(subject), lambda subject=subject: caches[1].get(subject))
    assert _records(caches[0]) == _records(caches[1])
    assert (caches[0].bytes, dict(caches[0].stats)) == (caches[1].bytes, dict(caches[1].stats))
    same(lambda: caches[0].poll(100.0), lambda: caches[1].poll(100.0))
