"""Redis glob patterns (PSUBSCRIBE), with the exact semantics of Redis's ``stringmatchlen``, matched in linear time.

Differences from :mod:`fnmatch` that matter: patterns and channels are bytes;
``\\x`` escapes ``x`` (also inside ``[...]``); ``[^...]`` negates; a range's
ends may be given in either order (``[z-a]``); an unterminated ``[`` class
runs to the end of the pattern; ``[]`` never matches; and the empty channel
is matched only by the empty pattern.

Why not one regular expression per pattern: a glob such as
``*a*a*a*a*a*b`` becomes ``.*a.*a.*a.*a.*a.*b``, which a backtracking engine
takes time exponential in the number of stars to reject, so one client could
freeze the gateway.  Every atom but ``*`` stands for exactly one byte, so a
pattern is a chain of fixed-length *segments* separated by stars, and the
classic glob argument applies: the first segment must match at the start,
the last at the end, and each middle one may be taken at its leftmost match
after the previous one (a later placement never helps).  Most patterns
(``news.*``, ``user:*:events``, any number of stars between short or literal
segments) are matched that way with :mod:`re`, each segment a regex of
single-byte classes without quantifiers: one search costs at most (channel
length x segment length) steps, and a literal segment is found by the
engine's linear literal search, so such a match takes a microsecond or less.
A pattern with a long middle segment of wildcards or classes (``*?a?a?a…*``,
``*[ab][ab]…*``), where that product would reach milliseconds, is matched by
RE2 instead, whose automaton is linear in the channel whatever the pattern
(about 3-5 us for a 512-byte pattern against a 1 KiB channel, where the
segment search took 0.5-0.7 ms).

:class:`GlobIndex` is the form for many patterns: patterns are grouped by
their literal prefix, so a channel is tried only against the patterns whose
prefix it starts with (plus those that start with a wildcard), and the
answer for recent channels is kept in a bounded cache.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from functools import lru_cache
from typing import Final, Generic, TypeVar

import re2

Matcher = Callable[[bytes], bool]
Search = Callable[[bytes, int, int], re.Match[bytes] | None]  # a compiled segment's search(channel, pos, endpos)
V = TypeVar("V")

MAX_PATTERN = 512  # bytes; a longer PSUBSCRIBE pattern or announced glob is refused
_STAR: Final = None  # the atom '*' in a parsed pattern; every other atom is the regex of one byte
_NEVER = b"[^\\x00-\\xff]"  # the class ``[]``: no byte (RE2 has no lookahead for ``(?!)``)
_ANY = b"."
# the most atoms a middle segment may have beyond its literal head for the segment search; longer: RE2
SEARCH_ATOMS = 8
_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.encoding = re2.Options.Encoding.LATIN1  # bytes are bytes, not UTF-8
_RE2_OPTIONS.dot_nl = True


def _byte(value: int) -> bytes:
    return re.escape(bytes((value,)))


def atoms(pattern: bytes) -> list[bytes | None]:
    """The pattern as atoms: ``None`` for a run of stars, else the regex (bytes) of one byte."""
    out: list[bytes | None] = []
    index, end = 0, len(pattern)
    while index < end:
        char = pattern[index]
        if char == 0x2A:  # '*'
            if not out or out[-1] is not _STAR:
                out.append(_STAR)
        elif char == 0x3F:  # '?'
            out.append(b".")
        elif char == 0x5B:  # '['
            index, piece = _translate_class(pattern, index + 1)
            out.append(piece)
            continue
        elif char == 0x5C and index + 1 < end:  # '\' escapes the next byte
            index += 1
            out.append(_byte(pattern[index]))
        else:
            out.append(_byte(char))
        index += 1
    return out


def translate(pattern: bytes) -> bytes:
    """The regular expression (bytes, for ``re.DOTALL`` fullmatch) equivalent to ``pattern``.

    Kept as the specification the linear matcher is checked against on small
    inputs; never used to match (it backtracks).
    """
    return b"".join(b".*" if atom is _STAR else atom for atom in atoms(pattern))


def _translate_class(pattern: bytes, index: int) -> tuple[int, bytes]:
    """Translate the class starting after '['; returns the index after it and its regex."""
    end = len(pattern)
    negate = index < end and pattern[index] == 0x5E  # '^'
    if negate:
        index += 1
    items: list[bytes] = []
    while index < end:
        char = pattern[index]
        if char == 0x5C and end - index >= 2:
            items.append(_byte(pattern[index + 1]))
            index += 2
        elif char == 0x5D:  # ']'
            index += 1
            break
        elif end - index >= 3 and pattern[index + 1] == 0x2D:  # 'a-z', ends in either order
            low, high = sorted((char, pattern[index + 2]))
            items.append(_byte(low) + b"-" + _byte(high))
            index += 3
        else:
            items.append(_byte(char))
            index += 1
    if not items:
        return index, _ANY if negate else _NEVER
    return index, b"[" + (b"^" if negate else b"") + b"".join(items) + b"]"


def _segments(pattern: bytes) -> list[list[bytes]]:
    """The atoms between stars: one more segment than there are stars (some may be empty)."""
    segments: list[list[bytes]] = [[]]
    for atom in atoms(pattern):
        if atom is _STAR:
            segments.append([])
        else:
            segments[-1].append(atom)
    return segments


def _middle(segment: list[bytes]) -> tuple[int, Search | None, int]:
    """A middle segment as (leading '?' count, search of the rest or None, trailing '?' count).

    Any-byte atoms at either end only shift where the rest may match, so they
    are counted instead of searched (a run of ``?`` would otherwise make every
    search position cost its length).
    """
    lead, core, trail = _split_middle(segment)
    return lead, re.compile(b"".join(core), re.DOTALL).search if core else None, trail


def _searchable(segment: list[bytes]) -> bool:
    """Whether the segment search is cheap for this middle segment (see the module's docstring)."""
    _, core, _ = _split_middle(segment)
    head = 0
    while head < len(core) and _is_literal(core[head]):
        head += 1  # the literal head is found by the engine's linear literal search
    return len(core) - head <= SEARCH_ATOMS


def _is_literal(atom: bytes) -> bool:
    """Whether an atom stands for one given byte (``re.escape`` of it), not a class or any byte."""
    return (len(atom) == 1 and atom != _ANY) or (len(atom) == 2 and atom[0] == 0x5C)


def _split_middle(segment: list[bytes]) -> tuple[int, list[bytes], int]:
    lead = 0
    while lead < len(segment) and segment[lead] == _ANY:
        lead += 1
    trail = 0
    while trail < len(segment) - lead and segment[-1 - trail] == _ANY:
        trail += 1
    return lead, segment[lead:len(segment) - trail], trail


@lru_cache(maxsize=4096)
def compile_pattern(pattern: bytes) -> Matcher:
    """A function telling whether a channel matches ``pattern``, in time linear in the channel's length."""
    parsed = atoms(pattern)
    if _NEVER in parsed:
        return _no_channel
    segments = _segments(pattern)
    if not all(_searchable(segment) for segment in segments[1:-1]):
        return _automaton(parsed)
    return _segment_search(pattern, segments)


def _no_channel(channel: bytes) -> bool:
    return False


def _automaton(parsed: list[bytes | None]) -> Matcher:
    """RE2's linear-time match of the whole pattern (the pattern is not empty and holds a star)."""
    fullmatch = re2.compile(b"".join(b".*" if atom is _STAR else atom for atom in parsed),
                            _RE2_OPTIONS).fullmatch

    def matches(channel: bytes) -> bool:
        return bool(channel) and fullmatch(channel) is not None

    return matches


def _segment_search(pattern: bytes, segments: list[list[bytes]]) -> Matcher:
    first, last = segments[0], segments[-1]
    first_len, last_len = len(first), len(last)
    if len(segments) == 1:
        fullmatch = re.compile(b"".join(first), re.DOTALL).fullmatch

        def exact(channel: bytes) -> bool:
            return len(channel) == first_len and (fullmatch(channel) is not None if channel else not pattern)

        return exact
    middle = [_middle(segment) for segment in segments[1:-1] if segment]
    fixed = sum(len(segment) for segment in segments)
    first_match = re.compile(b"".join(first), re.DOTALL).match
    last_match = re.compile(b"".join(last), re.DOTALL).match

    def starred(channel: bytes) -> bool:
        end = len(channel)
        if end < fixed or not channel:
            return False
        if first_len and first_match(channel) is None:
            return False
        stop = end - last_len
        if last_len and last_match(channel, stop) is None:
            return False
        position = first_len
        for lead, search, trail in middle:
            if search is None:
                position += lead
            else:
                found = search(channel, position + lead, stop - trail)
                if found is None:
                    return False
                position = found.end() + trail
        return position <= stop

    return starred


def literal_prefix(pattern: bytes) -> bytes:
    """The bytes every matching channel starts with (up to the first wildcard or class)."""
    out = bytearray()
    index, end = 0, len(pattern)
    while index < end:
        char = pattern[index]
        if char in (0x2A, 0x3F, 0x5B):  # '*', '?', '['
            break
        if char == 0x5C and index + 1 < end:
            index += 1
            char = pattern[index]
        out.append(char)
        index += 1
    return bytes(out)


def match(pattern: bytes, channel: bytes) -> bool:
    return compile_pattern(pattern)(channel)


class GlobIndex(Generic[V]):
    """Glob patterns, each with a value; which values' patterns match a channel, without trying them all.

    Patterns are grouped by literal prefix length, then prefix: a lookup asks
    one dict per distinct prefix length and matches only the patterns whose
    prefix the channel has.  Answers for the last ``cache_size`` channels are
    kept until the patterns change.
    """

    def __init__(self, cache_size: int = 4096) -> None:
        self._by_prefix: dict[int, dict[bytes, dict[bytes, tuple[Matcher, V]]]] = {}
        self._lengths: list[int] = []
        self._size = 0
        self._cache: dict[bytes, list[V]] = {}
        self._cache_size = cache_size

    def __len__(self) -> int:
        return self._size

    def __bool__(self) -> bool:
        return self._size > 0

    def add(self, pattern: bytes, value: V) -> None:
        """Map ``pattern`` to ``value`` (replacing the value it had)."""
        prefix = literal_prefix(pattern)
        group = self._by_prefix.setdefault(len(prefix), {}).setdefault(prefix, {})
        if pattern not in group:
            self._size += 1
        group[pattern] = (compile_pattern(pattern), value)
        self._lengths = sorted(self._by_prefix)
        self._cache.clear()

    def discard(self, pattern: bytes) -> None:
        prefix = literal_prefix(pattern)
        by_length = self._by_prefix.get(len(prefix))
        if by_length is None:
            return
        group = by_length.get(prefix)
        if group is None or pattern not in group:
            return
        del group[pattern]
        self._size -= 1
        if not group:
            del by_length[prefix]
            if not by_length:
                del self._by_prefix[len(prefix)]
                self._lengths = sorted(self._by_prefix)
        self._cache.clear()

    def get(self, pattern: bytes) -> V | None:
        prefix = literal_prefix(pattern)
        entry = self._by_prefix.get(len(prefix), {}).get(prefix, {}).get(pattern)
        return entry[1] if entry is not None else None

    def matching(self, channel: bytes) -> list[V]:
        """The values of every pattern that matches ``channel``."""
        cached = self._cache.get(channel)
        if cached is not None:
            return cached
        found: list[V] = []
        size = len(channel)
        for length in self._lengths:
            if length > size:
                break
            group = self._by_prefix[length].get(channel[:length])
            if group:
                found.extend(value for matches, value in group.values() if matches(channel))
        if len(self._cache) >= self._cache_size:
            del self._cache[next(iter(self._cache))]  # the oldest answer
        self._cache[channel] = found
        return found
