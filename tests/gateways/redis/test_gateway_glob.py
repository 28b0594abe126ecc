"""The linear-time Redis glob matcher and the glob index, against the regex translation and Redis's own algorithm."""
from __future__ import annotations

import re
import signal
from contextlib import contextmanager

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from test_gateway_redis_protocol import stringmatch

from fyrehose.subjects.redis_glob import (
    _NEVER,
    _STAR,
    GlobIndex,
    _automaton,
    atoms,
    compile_pattern,
    literal_prefix,
    match,
    translate,
)

ALPHABET = b"ab*?[]^-\\."
globs = st.binary(max_size=12).map(lambda raw: bytes(ALPHABET[byte % len(ALPHABET)] for byte in raw))
channels = st.binary(max_size=16).map(lambda raw: bytes(b"ab]-^\\[.*?"[byte % 10] for byte in raw))


def by_regex(pattern: bytes, channel: bytes) -> bool:
    """The former matcher: the whole glob as one backtracking regex (fine on small inputs)."""
    return re.fullmatch(translate(pattern), channel, re.DOTALL) is not None if channel else not pattern


@settings(max_examples=1500, deadline=None)
@given(globs, channels)
def test_the_linear_matcher_agrees_with_the_regex_translation(pattern, channel):
    assert match(pattern, channel) == by_regex(pattern, channel), translate(pattern)


@settings(max_examples=1500, deadline=None)
@given(globs, channels)
def test_the_linear_matcher_agrees_with_stringmatchlen(pattern, channel):
    assert match(pattern, channel) == stringmatch(pattern, channel), translate(pattern)


starred_globs = st.tuples(globs, globs).map(lambda halves: halves[0] + b"*" + halves[1])


@settings(max_examples=1500, deadline=None)
@given(starred_globs, channels)
def test_the_re2_automaton_agrees_with_stringmatchlen(pattern, channel):
    """The path taken by patterns with long wildcard segments, checked on every small pattern with a star."""
    parsed = atoms(pattern)
    assume(_STAR in parsed and _NEVER not in parsed)  # rare: the star sits inside a class, or a class is empty
    assert _automaton(parsed)(channel) == stringmatch(pattern, channel), translate(pattern)


def test_long_wildcard_segments_go_to_the_automaton():
    for pattern in (b"*" + b"[ab]" * 126 + b"c*", b"*" + b"a?" * 250 + b"c*", b"x*" + b"?a" * 9 + b"*y"):
        channel = b"x" + b"a" * 1000 + b"y"
        assert compile_pattern(pattern).__name__ == "matches"
        assert compile_pattern(pattern)(channel) == stringmatch(pattern, channel)
    assert compile_pattern(b"*a*a*a*a*b").__name__ == "starred"  # many stars, short segments: the segment search


@settings(max_examples=300, deadline=None)
@given(st.lists(globs, max_size=12), st.lists(channels, min_size=1, max_size=6),
       st.lists(st.integers(0, 11), max_size=4))
def test_the_index_finds_exactly_the_matching_patterns(patterns, probes, removed):
    index: GlobIndex[bytes] = GlobIndex(cache_size=2)
    held = dict.fromkeys(patterns)
    for pattern in held:
        index.add(pattern, pattern)
    for position in removed:  # removals invalidate cached answers
        if position < len(patterns):
            index.discard(patterns[position])
            held.pop(patterns[position], None)
    for channel in probes + probes:  # the second round is answered from the cache
        assert sorted(index.matching(channel)) == sorted(p for p in held if match(p, channel))
    assert len(index) == len(held)


def test_literal_prefixes():
    assert literal_prefix(b"news.*") == b"news."
    assert literal_prefix(b"a\\*b?c") == b"a*b"
    assert literal_prefix(b"[ab]x") == b"" and literal_prefix(b"") == b""


@contextmanager
def watchdog(seconds: int, what: str):
    """Fail (never hang) if the block runs longer than ``seconds``: the old matcher took minutes here."""
    def expired(signum, frame):
        raise AssertionError(f"{what} still running after {seconds} s: matching backtracks")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


HOSTILE = [
    (b"*a*a*a*a*a*a*a*a*a*a*b", b"a" * 1000),
    (b"*a*a*a*a*b", b"a" * 250),
    (b"*" + b"?" * 500 + b"b*", b"a" * 1000),
    (b"*[a]*[a]*[a]*[a]*[a]*[a]*[^a]", b"a" * 1000),
    (b"a*" * 400 + b"b", b"a" * 1000),
    (b"*" + b"[ab]" * 126 + b"b*", b"a" * 1024),
    (b"*" + b"a?" * 250 + b"b*", b"a" * 1024),
]


@pytest.mark.parametrize(("pattern", "channel"), HOSTILE, ids=[p[:16].decode() for p, _ in HOSTILE])
def test_backtracking_patterns_are_rejected_at_once(pattern, channel):
    with watchdog(20, f"matching {pattern[:24]!r}"):
        for _ in range(100):
            assert not compile_pattern(pattern)(channel)
        assert compile_pattern(pattern)(channel[:-1] + b"b")
