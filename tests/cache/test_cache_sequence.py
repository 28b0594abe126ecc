"""The record's sequence: kept per record by the cache, reported in a snapshot answer only when asked for."""
from __future__ import annotations

import orjson
import pytest

from fyrehose.cache.core import Cache
from fyrehose.subjects import envelope
from fyrehose.subjects.envelope import Envelope, MsgType, Status
from fyrehose.subjects.snapshots import WITH_SEQUENCE, record_sequence, sequence_headers, wants_sequence
from fyrehose.subjects.subscription_events import SubjectMessage

INBOX = "_INBOX.sam.n1.1"
T, S = MsgType, Status


def snap(cache, subject, data=WITH_SEQUENCE):
    (answer,) = cache.receive(Envelope("_SNAP." + subject, data, reply=INBOX), 0.0, 999)
    return answer


def test_each_update_sets_the_sequence_and_the_answer_carries_it():
    cache = Cache()
    cache.receive(Envelope("q.x", b'{"bid":1,"ask":2}', T.INITIAL), 0.0, 10)
    cache.receive(Envelope("q.x", b'{"bid":3}'), 0.0, 14)
    assert cache.get("q.x").seq == 14
    answer = snap(cache, "q.x")
    assert (answer.type, answer.status, orjson.loads(answer.data)) == (T.INITIAL, S.OK, {"bid": 3, "ask": 2})
    assert record_sequence(answer) == 14
    assert answer.headers == b"NATS/1.0\r\nFyrehose-Sequence: 14\r\n\r\n"
    assert record_sequence(envelope.decode(envelope.encode(answer))) == 14  # survives the wire (version 2)


def test_conflated_updates_keep_the_last_contributing_sequence():
    cache = Cache()
    stream = [Envelope("p.a", b'{"n":1}'), Envelope("p.b", b"x"), Envelope("p.a", b'{"m":2}'),
              Envelope("p.b", b"y"), Envelope("p.a", b'{"n":null}')]
    cache.receive_many(stream, 0.0, [21, 22, 25, 30, 31])
    assert cache.stats["conflated updates"] == 3
    assert (cache.get("p.a").data, cache.get("p.a").seq) == (b'{"m":2}', 31)
    assert (cache.get("p.b").data, cache.get("p.b").seq) == (b"y", 30)
    cache.receive_many([Envelope("p.a", b'{"k":3}'), Envelope("_SNAP.p.a", WITH_SEQUENCE, reply=INBOX),
                        Envelope("p.a", b'{"k":4}')], 0.0, [40, 41, 42])
    assert cache.get("p.a").seq == 42
    answer, = cache.receive_many([Envelope("_SNAP.p.a", WITH_SEQUENCE, reply=INBOX)], 0.0, [43])
    assert (orjson.loads(answer.data), record_sequence(answer)) == ({"m": 2, "k": 4}, 42)


def test_transient_verify_and_relocate_set_it_a_loss_does_not():
    cache = Cache()
    cache.receive(Envelope("q.x", b"v", T.INITIAL), 0.0, 5)
    cache.receive(Envelope("q.x", b"", T.TRANSIENT, S.STALE), 0.0, 6)
    assert (cache.get("q.x").status, cache.get("q.x").seq) == (S.STALE, 6)
    cache.receive(Envelope("q.x", b"w", T.VERIFY, S.OK), 0.0, 7)
    assert (cache.get("q.x").status, cache.get("q.x").seq) == (S.OK, 7)
    cache.lost()
    assert (cache.get("q.x").status, cache.get("q.x").seq) == (S.STALE, 7)
    cache.receive(Envelope("q.x", b"q.y", T.DROP, S.RELOCATE), 0.0, 8)
    assert (cache.get("q.y").data, cache.get("q.y").seq) == (b"w", 8)
    moved = snap(cache, "q.x")
    assert (moved.type, moved.status, moved.data, record_sequence(moved)) == (T.DROP, S.RELOCATE, b"q.y", 8)


def test_an_answer_not_asked_for_the_sequence_is_the_version_1_answer_it_always_was():
    cache = Cache()
    cache.receive(Envelope("q.x", b"v"), 0.0, 3)
    for data in (b"", b"{}", b'{"sequence":false}', b'{"sequence":1}', b"not json", b"[true]", b"[" * 100_000):
        answer = snap(cache, "q.x", data)
        assert answer == Envelope(INBOX, b"v", T.INITIAL, S.OK)
        assert envelope.encode(answer)[2] == 1  # the version byte: readers of version 1 still take it
    assert cache.stats["bad requests"] == 0  # a snapshot's data was always ignored; other data still is


def test_no_sequence_without_a_record_or_without_a_given_sequence():
    cache = Cache()
    missing = snap(cache, "q.x")
    assert (missing.type, missing.status, missing.headers) == (T.SNAP, S.NOT_FOUND, None)
    cache.receive(Envelope("q.x", b"v"), 0.0)  # a driver that gives no sequences
    assert snap(cache, "q.x").headers is None


def test_a_batch_needs_one_sequence_per_envelope():
    with pytest.raises(ValueError):
        Cache().receive_many([Envelope("q.x", b"v")], 0.0, [1, 2])


@pytest.mark.parametrize("headers, seq", [
    (sequence_headers(0), 0),
    (sequence_headers(2**64 - 1), 2**64 - 1),
    (b"NATS/1.0\r\nOther: 1\r\nfyrehose-sequence:  77 \r\n\r\n", 77),
    (b"NATS/1.0\r\nFyrehose-Sequence: -1\r\n\r\n", None),
    (b"NATS/1.0\r\nFyrehose-Sequence: 1e3\r\n\r\n", None),
    (b"NATS/1.0\r\nFyrehose-Sequence: " + b"9" * 21 + b"\r\n\r\n", None),
    (b"NATS/1.0\r\nFyrehose-Sequence: \xd9\xa3\r\n\r\n", None),  # a non-ASCII digit
    (b"Fyrehose-Sequence: 5\r\n\r\n", None),  # the first line is the status line, never a field
    (b"", None),
    (None, None),
])
def test_record_sequence_reads_only_a_well_formed_field(headers, seq):
    message = Envelope(INBOX, b"v", T.INITIAL, headers=headers)
    assert record_sequence(message) == seq
    assert SubjectMessage(1, message).record_seq == seq


def test_wants_sequence_only_for_exactly_true():
    assert wants_sequence(WITH_SEQUENCE) and wants_sequence(b'{ "sequence" : true, "other": 1 }')
    assert not any(wants_sequence(data) for data in (b"", b"null", b'{"sequence":"true"}', b"\xff", b'"x"'))
