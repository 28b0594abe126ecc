"""Subject-pattern matching: ``*`` stands for exactly one token, ``>`` for one or more trailing tokens.

These are the RV/NATS rules (``a.*`` matches ``a.b`` but neither ``a`` nor
``a.b.c``; ``a.>`` matches ``a.b`` and ``a.b.c`` but not ``a``).  Subjects and
patterns are validated with :func:`fyrehose.subjects.envelope.check_subject`, so a bad
one raises :class:`~fyrehose.subjects.envelope.EnvelopeError` instead of silently
matching nothing.

:func:`match` answers for one pattern; :class:`SubjectIndex` is the form for
many patterns at once (a cache, a gateway or a client with many
subscriptions): a token trie, so a lookup walks the subject's tokens once
instead of testing every pattern.
"""
from __future__ import annotations

from collections.abc import Hashable, Iterator
from functools import lru_cache
from typing import Generic, TypeVar

from fyrehose.subjects.envelope import check_subject

WILDCARD_ONE = "*"
WILDCARD_REST = ">"

V = TypeVar("V", bound=Hashable)


@lru_cache(maxsize=4096)
def _pattern_tokens(pattern: str) -> tuple[str, ...]:
    check_subject(pattern, wildcards=True)
    return tuple(pattern.split("."))


@lru_cache(maxsize=4096)
def _subject_tokens(subject: str) -> tuple[str, ...]:
    check_subject(subject)
    return tuple(subject.split("."))


def check_pattern(pattern: str) -> str:
    """``pattern`` if it is a valid subscription pattern, else EnvelopeError."""
    _pattern_tokens(pattern)
    return pattern


def is_literal(pattern: str) -> bool:
    """True when ``pattern`` has no wildcard token (it matches exactly one subject)."""
    return not any(token in (WILDCARD_ONE, WILDCARD_REST) for token in _pattern_tokens(pattern))


def match(pattern: str, subject: str) -> bool:
    """Whether the subscription ``pattern`` matches the (wildcard-free) ``subject``."""
    wanted = _pattern_tokens(pattern)
    tokens = _subject_tokens(subject)
    for index, token in enumerate(wanted):
        if token == WILDCARD_REST:
            return len(tokens) > index
        if index >= len(tokens) or (token != WILDCARD_ONE and token != tokens[index]):
            return False
    return len(tokens) == len(wanted)


class _Node(Generic[V]):
    __slots__ = ("children", "values")

    def __init__(self) -> None:
        self.children: dict[str, _Node[V]] = {}
        self.values: dict[V, None] = {}  # used as an insertion-ordered set


class SubjectIndex(Generic[V]):
    """Patterns mapped to values (several values per pattern, several patterns per value).

    ``lookup(subject)`` returns every value whose pattern matches, each once,
    in a deterministic order (the order the values were first added).
    """

    def __init__(self) -> None:
        self._root: _Node[V] = _Node()
        self._order: dict[V, int] = {}
        self._refs: dict[V, int] = {}
        self._added = 0
        self._entries = 0

    def add(self, pattern: str, value: V) -> bool:
        """Map ``pattern`` to ``value``; False if that pair was already present."""
        node = self._root
        for token in _pattern_tokens(pattern):
            node = node.children.setdefault(token, _Node())
        if value in node.values:
            return False
        node.values[value] = None
        if value not in self._order:
            self._order[value] = self._added
            self._added += 1
        self._refs[value] = self._refs.get(value, 0) + 1
        self._entries += 1
        return True

    def discard(self, pattern: str, value: V) -> bool:
        """Remove the pair; False if it was not present.  Empty branches are pruned."""
        path = [self._root]
        for token in _pattern_tokens(pattern):
            child = path[-1].children.get(token)
            if child is None:
                return False
            path.append(child)
        if value not in path[-1].values:
            return False
        del path[-1].values[value]
        self._entries -= 1
        self._refs[value] -= 1
        if not self._refs[value]:
            del self._refs[value]
            del self._order[value]
        for token, (parent, child) in zip(reversed(_pattern_tokens(pattern)), _pairs_backwards(path)):
            if child.values or child.children:
                break
            del parent.children[token]
        return True

    def discard_value(self, value: V) -> int:
        """Remove ``value`` from every pattern (a subscriber leaving); returns how many pairs went."""
        removed = [pattern for pattern, held in self.items() if held == value]
        for pattern in removed:
            self.discard(pattern, value)
        return len(removed)

    def lookup(self, subject: str) -> list[V]:
        """Every value whose pattern matches ``subject``, each once."""
        tokens = _subject_tokens(subject)
        found: dict[V, None] = {}
        stack = [(self._root, 0)]
        last = len(tokens)
        while stack:
            node, index = stack.pop()
            if index == last:
                found.update(node.values)
                continue
            rest = node.children.get(WILDCARD_REST)
            if rest is not None:
                found.update(rest.values)
            for token in (tokens[index], WILDCARD_ONE):
                child = node.children.get(token)
                if child is not None:
                    stack.append((child, index + 1))
        order = self._order
        return sorted(found, key=order.__getitem__)

    def items(self) -> Iterator[tuple[str, V]]:
        """Every (pattern, value) pair."""
        stack: list[tuple[_Node[V], tuple[str, ...]]] = [(self._root, ())]
        while stack:
            node, prefix = stack.pop()
            for value in node.values:
                yield ".".join(prefix), value
            for token, child in node.children.items():
                stack.append((child, prefix + (token,)))

    def __len__(self) -> int:
        return self._entries

    def __bool__(self) -> bool:
        return self._entries > 0


def _pairs_backwards(path: list[_Node[V]]) -> Iterator[tuple[_Node[V], _Node[V]]]:
    for index in range(len(path) - 1, 0, -1):
        yield path[index - 1], path[index]
