"""Interest announcements: who in the deployment subscribes to which subjects, kept live on every gateway.

A gateway answers some questions for its clients that need the whole
deployment's subscriptions, not only its own: NATS no-responders (is anyone
subscribed to this request's subject?) and the receiver count of a Redis
``PUBLISH``.  So every gateway and every subscribing :class:`fyrehose.Client`
announces its interest on the backbone, as sessions announce themselves
(docs/protocol.md, "Interest announcements"): one envelope on
``_INTEREST.ANNOUNCE`` per owner, sent when its subscriptions change and
again every ``interval`` seconds, carrying the owner's *whole* interest (so a lost or late announcement is repaired by the
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

from fyrehose.subjects.envelope import Envelope, EnvelopeError
from fyrehose.subjects.patterns import SubjectIndex, check_pattern
from fyrehose.subjects.redis_glob import MAX_PATTERN, GlobIndex
from fyrehose.subjects.session_table import DEFAULT_INTERVAL, parse_json_object, parse_number

INTEREST_SUBJECT = "_INTEREST.ANNOUNCE"
MISSED_ANNOUNCEMENTS = 3  # an owner is forgotten after this many intervals without an announcement
MAX_ANNOUNCEMENT = 60000  # bytes of JSON; beyond it an owner announces everything
EVERYTHING = {">": 1}
# bounds on what one announcement may claim (it may be forged by anyone who can publish on the backbone)
MAX_ENTRIES = 16384  # subject patterns plus globs
MAX_COUNT = 65536  # subscriptions counted for one pattern of one owner
MAX_INTERVAL = 60.0  # seconds; a longer announced interval is taken as this
MAX_OWNERS = 65536  # owners remembered at once; announcements from more are dropped
MAX_OWNER = 256  # characters of an owner's name
MAX_GLOBS = 16384  # distinct globs of all owners together (each may be tried on every subject counted)


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
        self.version = 0  # counts every change: a reader that remembers verdicts per subject decides again
        self._changed = False
        self._next = 0.0  # when the next periodic announcement is due
        self._announced = False  # whether anything was ever announced (an owner with no interest stays silent)

    def add(self, pattern: str) -> None:
        """A subscription to a subject pattern (NATS wildcards); EnvelopeError if it is not one."""
        self.version += 1  # first: whatever the caller subscribed before a bad pattern raises counts as a change
        check_pattern(pattern)
        self.subjects[pattern] = self.subjects.get(pattern, 0) + 1
        self._changed = True

    def remove(self, pattern: str) -> None:
        self.version += 1
        _decrement(self.subjects, pattern)
        self._changed = True

    def add_glob(self, glob: bytes) -> None:
        """A Redis pattern subscription (a glob over channel names)."""
        self.version += 1
        key = glob.decode("latin-1")
        self.globs[key] = self.globs.get(key, 0) + 1
        self._changed = True

    def remove_glob(self, glob: bytes) -> None:
        self.version += 1
        _decrement(self.globs, glob.decode("latin-1"))
        self._changed = True

    def due(self, now: float) -> bool:
        """Whether to announce now: after a change, or every interval once anything was announced."""
        if self._changed:
            return True
        return self._announced and now >= self._next

    def next_deadline(self) -> float:
        """When :meth:`due` next holds: at once after a change, never before anything was announced."""
        if self._changed:
            return float("-inf")
        return self._next if self._announced else float("inf")

    def announcement(self, now: float) -> Envelope:
        """The owner's whole interest, as an envelope to publish now."""
        self._changed = False
        self._announced = True
        self._next = now + self.interval
        return _announce(self.owner, self.interval, dict(self.subjects), dict(self.globs))

    def leave(self) -> Envelope | None:
        """The leave announcement (interval 0) for an owner that announced anything; None otherwise."""
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
    globs: list[bytes]


class InterestTable:
    """Everyone's announced interest: how many subscriptions, on owners other than one, match a subject.

    ``channel_of`` maps a subject to the Redis channel it carries, over which
    announced globs are matched; without it globs are kept out of the counts,
    which only Redis receiver counts use.

    Announcements come off the backbone, so anyone who can publish there can
    forge one: each is bounded before it is believed (at most
    :data:`MAX_ENTRIES` patterns, counts clamped to :data:`MAX_COUNT`, the
    interval capped at :data:`MAX_INTERVAL`, globs no longer than
    :data:`~fyrehose.subjects.redis_glob.MAX_PATTERN`, at most
    :data:`MAX_OWNERS` owners and :data:`MAX_GLOBS` distinct globs), and globs are matched in linear time through
    one :class:`~fyrehose.subjects.redis_glob.GlobIndex`.  Without
    authentication the counts are therefore only as honest as the backbone's
    publishers; with it, only signed announcements reach the table.
    """

    def __init__(self, channel_of: Callable[[str], bytes] | None = None, misses: int = MISSED_ANNOUNCEMENTS) -> None:
        self.channel_of = channel_of
        self.misses = misses
        self._index: SubjectIndex[_Entry] = SubjectIndex()
        self._globs: GlobIndex[dict[str, int]] = GlobIndex()  # glob -> owner -> count
        self._owners: dict[str, _Owner] = {}
        self.rejected = 0  # announcements that were not well-formed, dropped

    def __len__(self) -> int:
        return len(self._owners)

    def receive(self, envelope: Envelope, now: float) -> bool:
        """Take one ``_INTEREST.ANNOUNCE``; False (and counted) if it is malformed."""
        try:
            document = parse_json_object(envelope.data)
            owner = document["owner"]
            interval = min(parse_number(document.get("interval", DEFAULT_INTERVAL), "interval"), MAX_INTERVAL)
            subjects = document.get("subjects", {})
            globs = document.get("globs", {})
            if not isinstance(owner, str) or not isinstance(subjects, dict) or not isinstance(globs, dict):
                raise ValueError("owner, subjects or globs of the wrong type")
            if not 0 < len(owner) <= MAX_OWNER or len(subjects) + len(globs) > MAX_ENTRIES:
                raise ValueError("owner name or number of patterns out of bounds")
            for pattern, count in list(subjects.items()) + list(globs.items()):
                if not isinstance(count, int) or isinstance(count, bool) or count < 1:
                    raise ValueError(f"bad count for {pattern!r}")
            for pattern in subjects:
                check_pattern(pattern)
            encoded = {glob.encode("latin-1"): min(count, MAX_COUNT) for glob, count in globs.items()}
            if any(len(glob) > MAX_PATTERN for glob in encoded):
                raise ValueError("glob too long")
        except (KeyError, ValueError, EnvelopeError):  # UnicodeEncodeError is a ValueError
            self.rejected += 1
            return False
        if owner not in self._owners and len(self._owners) >= MAX_OWNERS and interval > 0:
            self.rejected += 1
            return False
        if self.channel_of is not None and interval > 0:
            held = set(self._owners[owner].globs) if owner in self._owners else set()
            new = sum(1 for glob in encoded if self._globs.get(glob) is None and glob not in held)
            if len(self._globs) - sum(1 for glob in held if self._sole(glob, owner)) + new > MAX_GLOBS:
                self.rejected += 1
                return False
        self._forget(owner)
        if interval <= 0:
            return True
        entries = {pattern: _Entry(owner, min(count, MAX_COUNT)) for pattern, count in subjects.items()}
        for pattern, entry in entries.items():
            self._index.add(pattern, entry)
        kept = list(encoded) if self.channel_of is not None else []
        for glob in kept:
            counts = self._globs.get(glob)
            if counts is None:
                self._globs.add(glob, {owner: encoded[glob]})
            else:
                counts[owner] = encoded[glob]
        self._owners[owner] = _Owner(now + interval * self.misses, entries, kept)
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
        if self._globs and self.channel_of is not None:
            for counts in self._globs.matching(self.channel_of(subject)):
                total += sum(count for owner, count in counts.items() if owner != exclude)
        return total

    def _sole(self, glob: bytes, owner: str) -> bool:
        """Whether ``owner`` is the only one announcing ``glob`` (forgetting it frees the index entry)."""
        counts = self._globs.get(glob)
        return counts is not None and counts.keys() == {owner}

    def _forget(self, owner: str) -> None:
        state = self._owners.pop(owner, None)
        if state is not None:
            for pattern, entry in state.subjects.items():
                self._index.discard(pattern, entry)
            for glob in state.globs:
                counts = self._globs.get(glob)
                if counts is not None:
                    counts.pop(owner, None)
                    if not counts:
                        self._globs.discard(glob)
