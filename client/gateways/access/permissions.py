"""A user's publish or subscribe rights: subject patterns allowed, and patterns denied (deny wins).

The pattern language is the subscriptions' (:mod:`fyrehose.subjects.patterns`):
``*`` one token, ``>`` one or more trailing tokens.  The rules follow
nats-server's authorization:

- a **publish** to a subject is permitted when some allow pattern matches it
  (no allow list: every subject) and no deny pattern does;
- a **subscription** to a pattern is permitted when every subject it can match
  is allowed (it is a *subset* of some allow pattern) and it is not wholly
  inside a deny pattern;
- a subscription that only *overlaps* a deny pattern (``>`` with ``secret.>``
  denied) is permitted, and the messages on denied subjects are kept from it
  (:meth:`Permissions.permits`, asked per subject delivered: the gateways
  cache the verdict per subject, so it is paid once per subject, not per
  message).

A pattern is compared as tokens; nothing here matches strings with regular
expressions, so a user's rule cannot make the gateway slow.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from fyrehose.subjects.patterns import WILDCARD_ONE, WILDCARD_REST, check_pattern

MAX_VERDICTS = 4096  # subjects whose verdict one Permissions remembers; then it starts again


def _tokens(pattern: str) -> tuple[str, ...]:
    return tuple(pattern.split("."))


def is_subset(inner: str, outer: str) -> bool:
    """Whether every subject the pattern ``inner`` matches is matched by ``outer`` (both valid patterns)."""
    small, large = _tokens(inner), _tokens(outer)
    for index, token in enumerate(large):
        if token == WILDCARD_REST:
            return len(small) > index
        if index >= len(small):
            return False
        mine = small[index]
        if mine == WILDCARD_REST:
            return False  # ``inner`` goes on for any number of tokens here; ``outer`` does not
        if token == WILDCARD_ONE:
            continue
        if mine != token:  # ``*`` against a literal, or two literals that differ
            return False
    return len(small) == len(large)


def overlaps(first: str, second: str) -> bool:
    """Whether some subject is matched by both patterns."""
    a, b = _tokens(first), _tokens(second)
    for index in range(max(len(a), len(b))):
        mine = a[index] if index < len(a) else None
        theirs = b[index] if index < len(b) else None
        if mine is None or theirs is None:
            return False  # one has ended, the other still needs a token
        if WILDCARD_REST in (mine, theirs):
            return True  # both have a token here, and one of them takes the rest
        if WILDCARD_ONE in (mine, theirs) or mine == theirs:
            continue
        return False
    return True


@dataclass(frozen=True)
class Permissions:
    """One direction's rights. ``allow`` None: everything not denied; an empty tuple: nothing."""

    allow: tuple[str, ...] | None = None
    deny: tuple[str, ...] = ()
    _verdicts: dict[str, bool] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def of(cls, allow: Iterable[str] | None = None, deny: Iterable[str] = ()) -> Permissions:
        """Checked patterns (EnvelopeError names the first bad one)."""
        return cls(None if allow is None else tuple(check_pattern(pattern) for pattern in allow),
                   tuple(check_pattern(pattern) for pattern in deny))

    @property
    def everything(self) -> bool:
        """Nothing is refused: checks can be skipped."""
        return self.allow is None and not self.deny

    def permits(self, subject: str) -> bool:
        """May this subject be published to, or delivered (a literal subject)."""
        verdict = self._verdicts.get(subject)
        if verdict is None:
            verdict = self._decide(subject)
            if len(self._verdicts) >= MAX_VERDICTS:
                self._verdicts.clear()
            self._verdicts[subject] = verdict
        return verdict

    def _decide(self, subject: str) -> bool:
        if self.allow is not None and not any(is_subset(subject, pattern) for pattern in self.allow):
            return False
        return not any(is_subset(subject, pattern) for pattern in self.deny)

    def permits_subscription(self, pattern: str) -> bool:
        """May a subscription to ``pattern`` be made (messages on denied subjects are still kept from it)."""
        if self.allow is not None and not any(is_subset(pattern, allowed) for allowed in self.allow):
            return False
        return not any(is_subset(pattern, denied) for denied in self.deny)

    def filters(self, pattern: str) -> bool:
        """Whether a permitted subscription to ``pattern`` reaches subjects this denies (so each must be asked)."""
        return any(overlaps(pattern, denied) for denied in self.deny)


EVERYTHING = Permissions()
NOTHING = Permissions(allow=())
