"""The rights matcher against a brute-force reference over a small universe of subjects."""
from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fyrehose.gateways.access.permissions import EVERYTHING, NOTHING, Permissions, is_subset, overlaps
from fyrehose.subjects.envelope import EnvelopeError
from fyrehose.subjects.patterns import match

TOKENS = ("a", "b", "c")
MAX_TOKENS = 4
# Every subject of up to MAX_TOKENS + 1 tokens from TOKENS plus one token no pattern names: enough to tell
# patterns of up to MAX_TOKENS tokens apart (a '>' that must take two tokens, a '*' that must not be 'a').
SUBJECTS = [".".join(parts) for length in range(1, MAX_TOKENS + 2)
            for parts in itertools.product((*TOKENS, "z"), repeat=length)]

patterns = st.lists(st.sampled_from((*TOKENS, "*")), min_size=0, max_size=MAX_TOKENS).flatmap(
    lambda head: st.sampled_from([head + [">"], head] if head else [[">"]])).map(".".join)
subjects = st.lists(st.sampled_from((*TOKENS, "z")), min_size=1, max_size=MAX_TOKENS + 1).map(".".join)


def matched(pattern: str) -> set[str]:
    return {subject for subject in SUBJECTS if match(pattern, subject)}


@settings(max_examples=400, deadline=None)
@given(patterns, patterns)
def test_is_subset_is_inclusion_of_what_the_patterns_match(inner, outer):
    assert is_subset(inner, outer) == (matched(inner) <= matched(outer))


@settings(max_examples=400, deadline=None)
@given(patterns, patterns)
def test_overlaps_is_a_common_subject(first, second):
    assert overlaps(first, second) == bool(matched(first) & matched(second))
    assert overlaps(first, second) == overlaps(second, first)


@settings(max_examples=300, deadline=None)
@given(st.none() | st.lists(patterns, max_size=3), st.lists(patterns, max_size=3), subjects)
def test_a_subject_is_permitted_when_allowed_and_not_denied(allow, deny, subject):
    rights = Permissions.of(allow, deny)
    allowed = allow is None or any(match(pattern, subject) for pattern in allow)
    denied = any(match(pattern, subject) for pattern in deny)
    assert rights.permits(subject) == (allowed and not denied)
    assert rights.permits(subject) == (allowed and not denied)  # the remembered verdict is the same


@settings(max_examples=300, deadline=None)
@given(st.none() | st.lists(patterns, max_size=3), st.lists(patterns, max_size=3), patterns)
def test_a_subscription_is_permitted_inside_one_allow_and_not_inside_a_deny(allow, deny, pattern):
    rights = Permissions.of(allow, deny)
    mine = matched(pattern)
    inside_allow = allow is None or any(mine <= matched(allowed) for allowed in allow)
    inside_deny = any(mine <= matched(denied) for denied in deny)
    assert rights.permits_subscription(pattern) == (inside_allow and not inside_deny)
    # deliveries must be asked exactly when the subscription reaches a denied subject
    assert rights.filters(pattern) == any(mine & matched(denied) for denied in deny)


def test_nats_examples():
    rights = Permissions.of(["orders.>", "_INBOX.>"], ["orders.audit"])
    assert rights.permits("orders.new")
    assert not rights.permits("orders.audit")
    assert not rights.permits("payments.new")
    assert rights.permits_subscription("orders.*")
    assert not rights.permits_subscription(">")
    assert not rights.permits_subscription("orders.audit")
    assert rights.filters("orders.*") and not rights.filters("orders.new")


def test_everything_and_nothing():
    assert EVERYTHING.everything and EVERYTHING.permits("x") and EVERYTHING.permits_subscription(">")
    assert not NOTHING.everything and not NOTHING.permits("x") and not NOTHING.permits_subscription("x")


@pytest.mark.parametrize("bad", ["", "a..b", "a.>.b", " a", "a b"])
def test_a_bad_pattern_is_refused_by_name(bad):
    with pytest.raises(EnvelopeError):
        Permissions.of([bad])
