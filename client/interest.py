"""Interest announcements: who in the deployment subscribes to which subjects, kept live on every gateway.

A gateway answers some questions for its clients that need the whole
deployment's subscriptions, not only its own: NATS no-responders (is anyone
subscribed to this request's subject?) and the receiver count of a Redis
``PUBLISH``.  So every gateway and every subscribing :class:`fyrehose.Client`
announces its interest on the backbone, as seeds/004 sessions announce
theirs: one envelope on ``_INTEREST.ANNOUNCE`` per owner, sent when its
subscriptions change and again every ``interval`` seconds, carrying the
owner's *whole* interest (so a lost or late announcement is repaired by the
next one, and replays are harmless).  An owner that stops announcing for
``MISSED_ANNOUNCEMENTS`` intervals is forgotten; one that leaves announces an
interval of 0.

The announcement's DATA is a JSON object::

    {"owner": "gw.3f2a...", "interval": 2.0,
     "subjects": {"orders.>": 2, "_INBOX.x.*": 1},    # subject patterns, NATS wildcards, with counts
     "globs": {"news.*": 1}}                          # Redis glob patterns over channel names (latin-1)

Counts are subscriptions, as Redis counts receivers (a client with a channel
and a matching pattern subscription counts twice).  An owner whose interest
does not fit one message announces ``{">": 1}`` instead: "everything",
which never makes a gateway answer "no responders" wrongly.

Two pure pieces: :class:`LocalInterest` (an owner's own patterns and when to
announce them) and :class:`InterestTable` (everyone's, as the announcements
arrive).  Times are seconds from any monotonic clock.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import orjson

from .envelope import Envelope, EnvelopeError
from .sessions import DEFAULT_INTERVAL, parse_json_object, parse_number
from .subjects import SubjectIndex, check_pattern

INTEREST_SUBJECT = "_INTEREST.ANNOUNCE"
MISSED_ANNOUNCEMENTS = 3  # an owner is forgotten after this many intervals without an announcement
MAX_ANNOUNCEMENT = 60000  # bytes of JSON; beyond it an owner announces everything
EVERYTHING = {">": 1}

GlobMatcher = Callable[[str], Callable[[str], bool]]  # a glob -> whether a subject's channel matches it


class LocalInterest:
    """One owner's subscriptions, counted by pattern, and when they are due to be announced.

    Callers add and remove patterns from any thread of a gevent loop or the
    client's caller threads; :meth:`due` and :meth:`announcement` run on the
    client's receive thread and copy the dicts first (a C-level copy, atomic
    under the GIL).
    """

    def __init__(self, owner: str, interval: float = DEFAULT_INTERVAL) -> None:
        self.owner = owner
        self.interval = interval
        self.subjects: dict[str, int] = {}
        self.globs: dict[str, int] = {}
        self._changed = False
        self._next = 0.0  # when the next periodic announcement is due
        self._announced = False  # whether anything was ever announced (an owner with no interest stays silent)

    def add(self, pattern: str) -> None:
        """A subscription to a subject pattern (NATS wildcards); EnvelopeError if it is not one."""
        check_pattern(pattern)
        self.subjects[pattern] = self.subjects.get(pattern, 0) + 1
        self._changed = True

    def remove(self, pattern: str) -> None:
        _decrement(self.subjects, pattern)
        self._changed = True

    def add_glob(self, glob: bytes) -> None:
        """A Redis pattern subscription (a glob over channel names)."""
        key = glob.decode("latin-1")
        self.globs[key] = self.globs.get(key, 0) + 1
        self._changed = True

    def remove_glob(self, glob: bytes) -> None:
        _decrement(self.globs, glob.decode("latin-1"))
        self._changed = True

    def due(self, now: float) -> bool:
        """Whether to announce now: after a change, or every interval once anything was announced."""
        if self._changed:
            return True
        return self._announced and now >= self._next

    def announcement(self, now: float) -> Envelope:
        """The owner's whole interest, as an envelope to publish now."""
        self._changed = False
        self._announced = True
        self._next = now + self.interval
        return _announce(self.owner, self.interval, dict(self.subjects), dict(self.globs))

    def leave(self) -> Envelope | None:
        """The goodbye (interval 0) for an owner that announced anything; None otherwise."""
        if not self._announced:
            return None
        return _announce(self.owner, 0.0, {}, {})


def _decrement(counts: dict[str, int], key: str) -> None:
    left = counts.get(key, 0) - 1
    if left > 0:
        counts[key] = left
    else:
        counts.pop(key, None)


def _announce(owner: str, interval: float, subjects: dict[str, int], globs: dict[str, int]) -> Envelope:
    data = orjson.dumps({"owner": owner, "interval": interval, "subjects": subjects, "globs": globs})
    if len(data) > MAX_ANNOUNCEMENT:
        data = orjson.dumps({"owner": owner, "interval": interval, "subjects": EVERYTHING, "globs": {}})
    return Envelope(INTEREST_SUBJECT, data)


@dataclass(frozen=True, eq=False)
class _Entry:
    owner: str
    count: int


@dataclass
class _Owner:
    expires: float
    subjects: dict[str, _Entry]
    globs: list[tuple[Callable[[str], bool], int]]


class InterestTable:
    """Everyone's announced interest: how many subscriptions, on owners other than one, match a subject.

    ``glob_matcher`` turns an announced Redis glob into a predicate over
    subjects (the Redis gateway's channel mapping); without it globs are kept
    out of the counts, which only Redis receiver counts use.
    """

    def __init__(self, glob_matcher: GlobMatcher | None = None, misses: int = MISSED_ANNOUNCEMENTS) -> None:
        self.glob_matcher = glob_matcher
        self.misses = misses
        self._index: SubjectIndex[_Entry] = SubjectIndex()
        self._owners: dict[str, _Owner] = {}
        self.rejected = 0  # announcements that were not well-formed, dropped

    def __len__(self) -> int:
        return len(self._owners)

    def receive(self, envelope: Envelope, now: float) -> bool:
        """Take one ``_INTEREST.ANNOUNCE``; False (and counted) if it is malformed."""
        try:
            document = parse_json_object(envelope.data)
            owner = document["owner"]
            interval = parse_number(document.get("interval", DEFAULT_INTERVAL), "interval")
            subjects = document.get("subjects", {})
            globs = document.get("globs", {})
            if not isinstance(owner, str) or not isinstance(subjects, dict) or not isinstance(globs, dict):
                raise ValueError("owner, subjects or globs of the wrong type")
            for pattern, count in list(subjects.items()) + list(globs.items()):
                if not isinstance(count, int) or isinstance(count, bool) or count < 1:
                    raise ValueError(f"bad count for {pattern!r}")
            for pattern in subjects:
                check_pattern(pattern)
        except (KeyError, ValueError, EnvelopeError):
            self.rejected += 1
            return False
        self._forget(owner)
        if interval <= 0:
            return True
        entries = {pattern: _Entry(owner, count) for pattern, count in subjects.items()}
        for pattern, entry in entries.items():
            self._index.add(pattern, entry)
        matchers = [(self.glob_matcher(glob), count) for glob, count in globs.items()] if self.glob_matcher else []
        self._owners[owner] = _Owner(now + interval * self.misses, entries, matchers)
        return True

    def expire(self, now: float) -> list[str]:
        """Forget owners whose announcements stopped; their names."""
        gone = [owner for owner, state in self._owners.items() if state.expires <= now]
        for owner in gone:
            self._forget(owner)
        return gone

    def count(self, subject: str, *, exclude: str | None = None) -> int:
        """Subscriptions matching ``subject`` on every owner but ``exclude`` (a gateway's own, counted exactly)."""
        try:
            entries = self._index.lookup(subject)
        except EnvelopeError:
            return 0
        total = sum(entry.count for entry in entries if entry.owner != exclude)
        for owner, state in self._owners.items():
            if owner != exclude:
                total += sum(count for matches, count in state.globs if matches(subject))
        return total

    def _forget(self, owner: str) -> None:
        state = self._owners.pop(owner, None)
        if state is not None:
            for pattern, entry in state.subjects.items():
                self._index.discard(pattern, entry)
