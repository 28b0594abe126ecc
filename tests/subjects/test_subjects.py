"""Subject-pattern matching: match() against an independent regex model, and SubjectIndex against match()."""
from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fyrehose.subjects.envelope import EnvelopeError
from fyrehose.subjects.patterns import SubjectIndex, check_pattern, is_literal, match

TOKENS = st.sampled_from(["a", "b", "c", "FOO", "_INBOX", "é", "x1"])
subjects = st.lists(TOKENS, min_size=1, max_size=6).map(".".join)


@st.composite
def patterns(draw):
    tokens = draw(st.lists(st.one_of(TOKENS, st.just("*")), min_size=1, max_size=6))
    if draw(st.booleans()):
        tokens.append(">")
    return ".".join(tokens)


def regex_model(pattern: str, subject: str) -> bool:
    """Independent definition: '*' = one token, '>' = one or more tokens."""
    parts = []
    for token in pattern.split("."):
        if token == "*":
            parts.append(r"[^.]+")
        elif token == ">":
            parts.append(r".+")
        else:
            parts.append(re.escape(token))
    return re.fullmatch(r"\.".join(parts), subject) is not None


@given(patterns(), subjects)
def test_match_agrees_with_regex_model(pattern, subject):
    assert match(pattern, subject) == regex_model(pattern, subject)


@given(subjects)
def test_literal_pattern_matches_exactly_itself(subject):
    assert match(subject, subject)
    assert is_literal(subject)
    assert not match(subject, subject + ".x")
    assert not match(subject + ".x", subject)


@given(subjects, st.data())
def test_star_replacing_any_tokens_still_matches(subject, data):
    tokens = subject.split(".")
    starred = [("*" if data.draw(st.booleans()) else token) for token in tokens]
    assert match(".".join(starred), subject)
    assert not match(".".join(starred + ["*"]), subject)


@given(subjects, st.integers(min_value=0, max_value=6))
def test_tail_wildcard_needs_at_least_one_token(subject, keep):
    tokens = subject.split(".")
    prefix = tokens[:keep]
    pattern = ".".join(prefix + [">"])
    assert match(pattern, subject) == (len(tokens) > len(prefix))


@pytest.mark.parametrize("pattern,subject,expected", [
    ("a.*", "a.b", True), ("a.*", "a", False), ("a.*", "a.b.c", False),
    ("a.>", "a.b", True), ("a.>", "a.b.c", True), ("a.>", "a", False),
    (">", "a", True), ("*", "a.b", False), ("*.b.>", "x.b.y.z", True),
])
def test_rv_nats_examples(pattern, subject, expected):
    assert match(pattern, subject) is expected


@pytest.mark.parametrize("pattern", ["", "a..b", ".a", "a.", "a.>.b", "a*", "a.b>", "a b"])
def test_bad_patterns_raise(pattern):
    with pytest.raises(EnvelopeError):
        check_pattern(pattern)


@pytest.mark.parametrize("subject", ["a.*", "a.>", "", "a..b"])
def test_bad_subjects_raise(subject):
    with pytest.raises(EnvelopeError):
        match("a.>", subject)


@settings(max_examples=200)
@given(st.lists(st.tuples(patterns(), st.integers(0, 5)), max_size=25), st.lists(subjects, min_size=1, max_size=10))
def test_index_lookup_equals_brute_force(pairs, probes):
    index = SubjectIndex()
    for pattern, value in pairs:
        index.add(pattern, value)
    distinct = set(pairs)
    assert len(index) == len(distinct)
    assert sorted(index.items()) == sorted(distinct)
    for subject in probes:
        found = index.lookup(subject)
        assert len(found) == len(set(found))
        assert set(found) == {value for pattern, value in distinct if match(pattern, subject)}


@given(st.lists(st.tuples(patterns(), st.integers(0, 5)), max_size=25), st.data())
def test_index_discard_restores_brute_force(pairs, data):
    index = SubjectIndex()
    for pattern, value in pairs:
        index.add(pattern, value)
    remaining = set(pairs)
    for pattern, value in data.draw(st.permutations(sorted(remaining)))[: len(remaining) // 2]:
        assert index.discard(pattern, value)
        assert not index.discard(pattern, value)
        remaining.discard((pattern, value))
    assert sorted(index.items()) == sorted(remaining)
    for subject in data.draw(st.lists(subjects, min_size=1, max_size=5)):
        assert set(index.lookup(subject)) == {v for p, v in remaining if match(p, subject)}
    for pattern, value in sorted(remaining):
        index.discard(pattern, value)
    assert not index and not index._root.children  # branches pruned


def test_index_lookup_order_is_first_added_and_discard_value():
    index = SubjectIndex()
    index.add("a.>", "second-pattern")
    index.add("a.b", "first")
    index.add("*.b", "second-pattern")
    assert index.lookup("a.b") == ["second-pattern", "first"]
    assert sorted(index.items()) == [("*.b", "second-pattern"), ("a.>", "second-pattern"), ("a.b", "first")]
    assert index.discard_value("second-pattern") == 2
    assert index.lookup("a.b") == ["first"]
    assert index.lookup("a.c") == []


# ---------------------------------------------------------------- initial values against live updates (pure)

from fyrehose.subjects.envelope import Envelope, MsgType, Status  # noqa: E402
from fyrehose.subjects.subscription_events import InitialGate, SubjectMessage  # noqa: E402


@given(st.integers(0, 30), st.integers(0, 30), st.integers(0, 30), st.integers(0, 30))
def test_gate_yields_the_initial_then_exactly_the_newer_updates(before_subscribe, before_request, before_answer,
                                                                after_answer):
    """A counter subject: whatever interleaving, the subscriber sees one contiguous, increasing run."""
    gate = InitialGate("c.x", now=0.0)
    seq, value, out = 0, 0, []

    def update():
        nonlocal seq, value
        seq += 1
        value += 1
        out.extend(gate.update(SubjectMessage(seq, Envelope("c.x", str(value).encode()))))

    for _ in range(before_subscribe):  # published before the subscription: never seen
        seq += 1
        value += 1
    request = gate.request("_INBOX.me.1", now=0.0)
    assert request.subject == "_SUB.START.c.x" and request.reply == "_INBOX.me.1"
    for _ in range(before_request):  # held, but older than the state the cache will answer with
        update()
    seq += 1
    gate.request_seen("_INBOX.me.1", seq)
    snapshot = value
    for _ in range(before_answer):  # newer than the answer: must follow it
        update()
    seq += 1
    out.extend(gate.answer("_INBOX.me.1", SubjectMessage(seq, Envelope("_INBOX.me.1", str(snapshot).encode(),
                                                                       MsgType.INITIAL))))
    for _ in range(after_answer):
        update()
    values = [int(m.data) for m in out]
    assert out[0].subject == "c.x" and out[0].type == MsgType.INITIAL
    assert values == list(range(snapshot, value + 1))


def test_gate_retries_then_times_out_and_releases_what_it_held():
    gate = InitialGate("c.x", now=0.0, timeout=2.0, retry=0.5)
    gate.request("_INBOX.me.1", 0.0)
    held = SubjectMessage(5, Envelope("c.x", b"1"))
    assert gate.update(held) == []
    assert not gate.due(0.4) and gate.due(0.5)
    gate.request("_INBOX.me.2", 0.5)
    assert gate.expire(1.9) == [] and gate.next_deadline() == 1.0
    assert gate.expire(2.0) == [held] and gate.timed_out and gate.done
    assert not gate.due(3.0)
    late = SubjectMessage(9, Envelope("_INBOX.me.1", b"", MsgType.INITIAL, Status.NOT_FOUND))
    assert gate.answer("_INBOX.me.1", late) == []  # too late: the stream went on without it


def test_gate_takes_one_answer_from_any_attempt():
    gate = InitialGate("c.x", now=0.0)
    gate.request("_INBOX.me.1", 0.0)
    gate.request("_INBOX.me.2", 0.5)
    answer = SubjectMessage(3, Envelope("_INBOX.me.2", b"v", MsgType.INITIAL))
    assert [m.data for m in gate.answer("_INBOX.me.2", answer)] == [b"v"]
    assert gate.answer("_INBOX.me.1", SubjectMessage(4, Envelope("_INBOX.me.1", b"w", MsgType.INITIAL))) == []
    assert gate.answer("_INBOX.other.1", answer) == []


# ---------------------------------------------------------------- the client's subject layer, end to end

import time  # noqa: E402

from conftest import BACKBONE_MODES  # noqa: E402

from fyrehose import Client, MessagesLost  # noqa: E402
from fyrehose.drivers.client import RequestTimeout  # noqa: E402
from fyrehose.protocol.tracker import Lost, Message  # noqa: E402
from fyrehose.subjects.envelope import decode, peek_subject  # noqa: E402
from fyrehose.subjects.interest import INTEREST_SUBJECT  # noqa: E402

from support import EVENT_WITHIN, LossyRelay  # noqa: E402


def drain(stream, count, timeout=EVENT_WITHIN):
    events, deadline = [], time.monotonic() + timeout
    while len(events) < count and time.monotonic() < deadline:
        event = stream.get(timeout=max(0.0, deadline - time.monotonic()))
        if event is not None:
            events.append(event)
    return events


def test_patterns_filter_one_ordered_stream_and_raw_stays_raw(backbone):
    with Client(backbone.addr) as sub, Client(backbone.addr, subscribe=False) as pub:
        everything, quotes, intc, star = (sub.subscribe(), sub.subscribe("NASDAQ.>"), sub.subscribe("NASDAQ.INTC"),
                                          sub.subscribe("*.INTC"))
        seq_raw = pub.publish(b"raw bytes")
        seq_intc = pub.publish(b"i", subject="NASDAQ.INTC", status=Status.STALE)
        seq_nyse = pub.publish(b"n", subject="NYSE.INTC", type=MsgType.INITIAL)
        pub.publish_many([b"m1", b"m2"], subject="NASDAQ.MSFT")
        pub.publish_many([Envelope("NASDAQ.AAPL", b"a", MsgType.VERIFY)])
        pub.publish_nowait(b"late", subject="NASDAQ.INTC")
        pub.flush()
        raw = []  # the raw stream also carries sub's own interest announcements: skip them
        while len(raw) < 7 and (batch := drain(everything, 1)):
            raw += [m for m in batch if peek_subject(m.data) != INTEREST_SUBJECT]
        assert all(isinstance(m, Message) for m in raw) and raw[0].data == b"raw bytes" and raw[0].seq == seq_raw
        assert decode(raw[1].data) == Envelope("NASDAQ.INTC", b"i", status=Status.STALE)
        assert [(m.subject, m.data) for m in drain(quotes, 5)] == [
            ("NASDAQ.INTC", b"i"), ("NASDAQ.MSFT", b"m1"), ("NASDAQ.MSFT", b"m2"), ("NASDAQ.AAPL", b"a"),
            ("NASDAQ.INTC", b"late")]
        first = drain(intc, 2)
        assert [(m.seq, m.status) for m in first][0] == (seq_intc, Status.STALE) and first[1].data == b"late"
        assert [(m.seq, m.type) for m in drain(star, 3)][:2] == [(seq_intc, MsgType.UPDATE),
                                                                 (seq_nyse, MsgType.INITIAL)]
        for stream in (quotes, intc, star):
            assert stream.get(timeout=0.2) is None


def test_publish_refuses_envelope_fields_without_subject_and_bad_subjects(backbone):
    with Client(backbone.addr, subscribe=False) as pub:
        for kwargs in ({"type": MsgType.INITIAL}, {"status": Status.STALE}, {"reply": "_INBOX.x"}):
            with pytest.raises(ValueError):
                pub.publish(b"x", **kwargs)
        with pytest.raises(EnvelopeError):
            pub.publish(b"x", subject="a.*")
    with Client(backbone.addr) as sub:
        with pytest.raises(EnvelopeError):
            sub.subscribe("a..b")
        with pytest.raises(ValueError):
            sub.subscribe("a.>", initial=True)


@pytest.mark.parametrize("workers", BACKBONE_MODES, ids=lambda workers: f"workers={workers}")
def test_loss_events_reach_every_subscription(backbone_factory, workers):
    backbone = backbone_factory(workers=workers, extra=["--recent-bytes", "0"])  # nobody can fill the holes
    relay = LossyRelay(backbone.addr, drop_every=3)
    try:
        with Client(relay.addr, journal=False, give_up_after=0.3) as lossy, \
                Client(backbone.addr, subscribe=False) as pub:
            streams = [lossy.subscribe(on_loss="yield"), lossy.subscribe("q.>", on_loss="yield"),
                       lossy.subscribe("nothing.matches", on_loss="yield"), lossy.subscribe("q.>")]
            for index in range(12):
                pub.publish(b"%d" % index, subject="q.x")
            for stream in streams[:3]:
                deadline = time.monotonic() + EVENT_WITHIN
                while not isinstance(event := stream.get(timeout=1), Lost):
                    assert time.monotonic() < deadline, "no loss reported"
                    assert event is None or stream is not streams[2]  # nothing else ever matches
            # the loss reaches this stream too; a dropped datagram need not have carried a q.x
            # message (an ACK or an interest announcement), so the Lost may come after all 12
            with pytest.raises(MessagesLost):
                drain(streams[3], 13)
    finally:
        relay.close()


def test_request_times_out_without_an_answer_and_unsubscribe_stops(backbone):
    with Client(backbone.addr, user="sam") as client:
        with pytest.raises(RequestTimeout):
            client.request("service.nobody", b"?", timeout=0.3, retry=0.1)
        watcher = client.subscribe("_SUB.>")
        gated = client.subscribe("q.x", initial=True, initial_timeout=0.3, initial_retry=0.1)
        client.publish(b"update", subject="q.x")
        starts = drain(watcher, 2)
        assert [m.subject for m in starts] == ["_SUB.START.q.x"] * 2  # retried
        assert gated.get(timeout=EVENT_WITHIN).data == b"update"  # released after the timeout
        assert client.stats["initial timeouts"] == 1
        client.unsubscribe(gated)
        assert gated.get(timeout=0.1) is None
        subjects: list[str] = []
        deadline = time.monotonic() + EVENT_WITHIN
        while "_SUB.STOP.q.x" not in subjects and time.monotonic() < deadline:
            event = watcher.get(timeout=0.5)
            if event is not None:
                subjects.append(event.subject)
        assert subjects[-1] == "_SUB.STOP.q.x"
        assert set(subjects[:-1]) <= {"_SUB.START.q.x"}  # at most the last retries before the timeout


def test_request_reply_between_two_clients(backbone):
    with Client(backbone.addr) as server, Client(backbone.addr) as caller:
        requests = server.subscribe("svc.echo")

        def serve():
            request = requests.get(timeout=EVENT_WITHIN)
            server.publish(request.data.upper(), subject=request.reply)

        import threading
        thread = threading.Thread(target=serve)
        thread.start()
        answer = caller.request("svc.echo", b"hello", timeout=EVENT_WITHIN)
        thread.join(5)
        assert answer.data == b"HELLO" and answer.subject.startswith("_INBOX.")
