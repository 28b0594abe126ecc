"""Redis glob patterns (PSUBSCRIBE), with the exact semantics of Redis's ``stringmatchlen``.

Differences from :mod:`fnmatch` that matter: patterns and channels are bytes;
``\\x`` escapes ``x`` (also inside ``[...]``); ``[^...]`` negates; a range's
ends may be given in either order (``[z-a]``); an unterminated ``[`` class
runs to the end of the pattern; ``[]`` never matches; and the empty channel
is matched only by the empty pattern.  The pattern is compiled once into a
regular expression, so matching many channels costs one regex call each.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from functools import lru_cache

Matcher = Callable[[bytes], bool]


def _byte(value: int) -> bytes:
    return re.escape(bytes((value,)))


def translate(pattern: bytes) -> bytes:
    """The regular expression (bytes, for ``re.DOTALL`` fullmatch) equivalent to ``pattern``."""
    out: list[bytes] = []
    index, end = 0, len(pattern)
    while index < end:
        char = pattern[index]
        if char == 0x2A:  # '*'
            while index + 1 < end and pattern[index + 1] == 0x2A:
                index += 1
            out.append(b".*")
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
    return b"".join(out)


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
        return index, b"." if negate else b"(?!)"
    return index, b"[" + (b"^" if negate else b"") + b"".join(items) + b"]"


@lru_cache(maxsize=4096)
def compile_pattern(pattern: bytes) -> Matcher:
    """A function telling whether a channel matches ``pattern``."""
    regex = re.compile(translate(pattern), re.DOTALL)
    fullmatch = regex.fullmatch

    def matches(channel: bytes) -> bool:
        return fullmatch(channel) is not None if channel else not pattern

    return matches


def subject_matcher(glob: str) -> Callable[[str], bool]:
    """A function telling whether a subject's channel matches ``glob`` (an announced glob, latin-1 text)."""
    from fyrehose.gateways.channels import subject_to_channel

    matches = compile_pattern(glob.encode("latin-1"))
    return lambda subject: matches(subject_to_channel(subject))


def match(pattern: bytes, channel: bytes) -> bool:
    return compile_pattern(pattern)(channel)
