"""A subscription pattern as a Java regular expression, so Spark can filter subjects with ``rlike``.

The rules are those of :func:`fyrehose.subjects.patterns.match`: ``*`` is exactly one
token, ``>`` one or more trailing tokens, anything else a literal token.
Tokens hold no dot, so ``[^.]+`` is one token.  The result is anchored with
``\\A`` and ``\\z`` (Java's ``$`` would also match before a final newline).
"""
from __future__ import annotations

import re

from fyrehose.subjects.patterns import WILDCARD_ONE, WILDCARD_REST, check_pattern

_TOKEN = r"[^.]+"


def pattern_regex(pattern: str) -> str:
    """The anchored Java regex matching exactly the subjects ``pattern`` matches (EnvelopeError if invalid)."""
    check_pattern(pattern)
    parts = []
    for token in pattern.split("."):
        if token == WILDCARD_ONE:
            parts.append(_TOKEN)
        elif token == WILDCARD_REST:
            parts.append(rf"{_TOKEN}(?:\.{_TOKEN})*")
        else:
            parts.append(re.escape(token))
    return r"\A" + r"\.".join(parts) + r"\z"
