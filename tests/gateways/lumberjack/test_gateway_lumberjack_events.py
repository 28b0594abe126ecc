"""Events as envelope messages: the subject rule for arbitrary field values, and the JSON body."""
from __future__ import annotations

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fyrehose.gateways.lumberjack.events import SubjectRule, subject_from_value, to_message
from fyrehose.gateways.lumberjack.protocol import VERSION_1, VERSION_2, JsonData, KeyValueData, LumberjackError
from fyrehose.protocol.codec import MAX_PAYLOAD
from fyrehose.subjects.envelope import EnvelopeError, check_subject, decode


@given(st.text(max_size=2000))
def test_any_text_becomes_a_valid_subject_or_none(value):
    subject = subject_from_value(value)
    if subject is None:
        assert not value.strip(".")
    else:
        check_subject(subject)


token = st.text(st.characters(blacklist_categories=("Zs", "Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"),
                              blacklist_characters=".*>"), min_size=1, max_size=10)


@given(st.lists(token, min_size=1, max_size=8).map(".".join))
def test_valid_subjects_are_kept_as_they_are(subject):
    check_subject(subject)
    assert subject_from_value(subject) == subject


@pytest.mark.parametrize("value, subject", [
    ("web.access", "web.access"),
    (".web..access.", "web.access"),
    ("my app.*.x>y", "my_app._.x_y"),
    ("tab\there\x00", "tab_here_"),
    ("...", None),
    ("", None),
])
def test_value_to_subject_examples(value, subject):
    assert subject_from_value(value) == subject


def test_long_values_are_cut_at_a_token_boundary():
    value = ".".join(["abcdefghi"] * 200)  # 1999 characters
    subject = subject_from_value(value)
    assert len(subject.encode()) <= 1024 and subject.endswith("abcdefghi")
    assert len(subject_from_value("é" * 600).encode()) == 1024  # one token: cut at a character boundary


def test_subject_field_lookup():
    rule = SubjectRule("@metadata.beat", "fallback")
    assert rule.subject({"@metadata": {"beat": "filebeat"}}) == "filebeat"
    assert rule.subject({"@metadata.beat": "flat", "@metadata": {"beat": "nested"}}) == "flat"
    assert rule.subject({"@metadata": {"beat": {"not": "text"}}}) == "fallback"
    assert rule.subject({"@metadata": "filebeat"}) == "fallback"
    assert rule.subject({}) == "fallback"
    number = SubjectRule("code", "fallback")
    assert number.subject({"code": 404}) == "404"
    assert number.subject({"code": 1.5}) == "1.5"
    assert number.subject({"code": True}) == "fallback"
    assert number.subject({"code": None}) == "fallback"
    assert number.subject({"code": " . "}) == "_._"


def test_an_event_cannot_name_an_internal_subject():
    rule = SubjectRule("type", "logs")
    assert rule.subject({"type": "_INTEREST.ANNOUNCE"}) == "logs"
    assert rule.subject({"type": "_SESSION.HB"}) == "logs"
    assert rule.subject({"type": "_INBOX.reply"}) == "_INBOX.reply"
    with pytest.raises(ValueError):
        SubjectRule("type", "_SESSION.BYE")


def test_a_bad_default_subject_or_empty_field_is_refused():
    with pytest.raises(EnvelopeError):
        SubjectRule("type", "has space")
    with pytest.raises(ValueError):
        SubjectRule("", "ok")


def test_key_value_and_json_events_become_envelopes_of_json_objects():
    rule = SubjectRule("type", "logs")
    envelope = decode(to_message(KeyValueData(VERSION_1, 1, {"type": "syslog", "line": "x"}), rule))
    assert envelope.subject == "syslog" and orjson.loads(envelope.data) == {"type": "syslog", "line": "x"}
    envelope = decode(to_message(JsonData(VERSION_2, 1, b'{ "a" : [1, 2] }'), rule))
    assert envelope.subject == "logs" and envelope.data == b'{"a":[1,2]}'


@pytest.mark.parametrize("document, message", [
    (b"{nope", "invalid JSON"),
    (b"[1, 2]", "not an object"),
    (b'"text"', "not an object"),
    (orjson.dumps({"x": "y" * MAX_PAYLOAD}), "above the backbone's limit"),
])
def test_events_that_cannot_be_published_are_errors(document, message):
    with pytest.raises(LumberjackError, match=message):
        to_message(JsonData(VERSION_2, 7, document), SubjectRule())
