"""Sessions (docs/subjects.md, "Sessions"): who is alive, and which subjects each one subscribed.

A session is named ``user.NONCE``; the NONCE is random and never reused, so a
session name identifies one run of one client for the lifetime of the network
(the authentication in :mod:`fyrehose.subjects.auth` binds its keys to it).  A session
announces itself on ``_SESSION.HELLO``, keeps alive on ``_SESSION.HB`` every
``interval`` seconds and leaves on ``_SESSION.BYE``; subscriptions it started
with ``_SUB.START.<subject>`` expire when its heartbeats stop.

Two pure pieces live here: :class:`LocalSession`, a client's own session (the
envelopes it sends, its per-session seqno), and :class:`SessionTable`, the
subscription manager's view of everyone else's sessions (what the cache uses
to publish ``drop``/``nosubscribers``).  Times are seconds from any monotonic
clock, except the wall-clock microseconds carried in heartbeats.
"""
from __future__ import annotations

import itertools
import json
import math
import secrets
from collections import OrderedDict
from dataclasses import dataclass, field, replace

from fyrehose.errors import InputError
from fyrehose.subjects.envelope import Envelope, EnvelopeError, check_subject

HELLO = "_SESSION.HELLO"
HEARTBEAT = "_SESSION.HB"
BYE = "_SESSION.BYE"
SNAP_PREFIX = "_SNAP."
SUB_START_PREFIX = "_SUB.START."
SUB_STOP_PREFIX = "_SUB.STOP."
INBOX_PREFIX = "_INBOX."
AUTH_SUFFIX = "auth"
NONCE_BYTES = 16
DEFAULT_INTERVAL = 2.0
MISSED_HEARTBEATS = 3  # a session is gone after this many intervals without a heartbeat


def new_session_name(user: str) -> str:
    """``user.NONCE`` with a fresh 128-bit NONCE; ``user`` (the node's own, often given by ``--user``) must be one
    subject token, or InputError."""
    name = f"{user}.{secrets.token_hex(NONCE_BYTES)}"
    try:
        parse_session(name)
    except ValueError:
        raise InputError(f"bad user name {user!r}: sessions are named USER.NONCE, so it must be one subject token "
                         "(no '.', '*', '>' or whitespace)") from None
    return name


def parse_session(name: str) -> tuple[str, str]:
    """(user, nonce) of a session name; ValueError unless it is exactly two subject tokens."""
    try:
        check_subject(name)
    except EnvelopeError as exc:
        raise ValueError(f"bad session name {name!r}: {exc}") from None
    tokens = name.split(".")
    if len(tokens) != 2:
        raise ValueError(f"bad session name {name!r}: must be USER.NONCE")
    return tokens[0], tokens[1]


def inbox(owner: str, suffix: str) -> str:
    """The inbox subject ``_INBOX.<owner>.<suffix>`` (owner: a session name or a random token)."""
    return check_subject(f"{INBOX_PREFIX}{owner}.{suffix}").decode()


def parse_json_object(data: bytes) -> dict[str, object]:
    try:
        value = json.loads(data) if data else {}
    except (ValueError, RecursionError) as exc:  # RecursionError: absurdly nested input off the wire
        raise ValueError(f"not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ValueError("not a JSON object")
    return value


def parse_number(value: object, name: str, *, integer: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (integer and not isinstance(value, int)):
        raise ValueError(f"{name} must be a{'n integer' if integer else ' number'}")
    if not math.isfinite(value) or not 0 <= value < 1 << 63:
        raise ValueError(f"{name} must be finite, not negative and below 2**63")
    return value


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """The data of ``_SESSION.HELLO`` and ``_SESSION.HB``: wall time, interval, client nonce."""

    time_us: int
    interval: float
    cnonce: str

    def encode(self) -> bytes:
        return json.dumps({"time": self.time_us, "interval": self.interval, "cnonce": self.cnonce},
                          separators=(",", ":")).encode()

    @classmethod
    def decode(cls, data: bytes) -> Heartbeat:
        value = parse_json_object(data)
        time_us = int(parse_number(value.get("time"), "time", integer=True))
        interval = parse_number(value.get("interval"), "interval")
        cnonce = value.get("cnonce")
        if not interval or not isinstance(cnonce, str) or not 0 < len(cnonce) <= 64:
            raise ValueError("heartbeat needs a positive interval and a cnonce of 1..64 characters")
        return cls(time_us, float(interval), cnonce)


@dataclass(frozen=True, slots=True)
class StartOptions:
    """The data of ``_SUB.START.<subject>``; empty data means the defaults.

    ``initial``: answer with the cached value (only when the request has a
    reply subject); ``ack``: answer ``start``/``ack`` first; ``expires``:
    seconds the subscription outlives the session's last heartbeat (default
    three heartbeat intervals).
    """

    initial: bool = True
    ack: bool = False
    expires: float | None = None

    def encode(self) -> bytes:
        value: dict[str, bool | float] = {"initial": self.initial, "ack": self.ack}
        if self.expires is not None:
            value["expires"] = self.expires
        return json.dumps(value, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, data: bytes) -> StartOptions:
        value = parse_json_object(data)
        initial, ack = value.get("initial", True), value.get("ack", False)
        if not isinstance(initial, bool) or not isinstance(ack, bool):
            raise ValueError("initial and ack must be true or false")
        expires = value.get("expires")
        if expires is not None:
            expires = float(parse_number(expires, "expires"))
        return cls(initial, ack, expires)


def stop_wants_ack(data: bytes) -> bool:
    """The data of ``_SUB.STOP.<subject>``: ``{"ack": true}`` asks for a ``stop``/``ack`` answer."""
    ack = parse_json_object(data).get("ack", False)
    if not isinstance(ack, bool):
        raise ValueError("ack must be true or false")
    return ack


class LocalSession:
    """A client's own session: its name, its seqno counter and the heartbeats it sent.

    :meth:`stamp` gives an outgoing envelope the session and the next seqno
    (safe from several threads: the counter is one atomic ``next``).  The
    client nonces of recent heartbeats are kept because the trust exchange of
    :mod:`fyrehose.subjects.auth` answers a heartbeat by binding its reply to them.
    """

    KEEP_HEARTBEATS = 16

    def __init__(self, user: str, interval: float = DEFAULT_INTERVAL, name: str | None = None) -> None:
        if not 0 < interval <= 3600:
            raise InputError("session interval must be in (0, 3600] seconds")
        self.name = name or new_session_name(user)
        self.user, self.nonce = parse_session(self.name)
        self.interval = interval
        self._seqnos = itertools.count(1)
        self._sent: OrderedDict[int, str] = OrderedDict()  # heartbeat time_us -> cnonce

    def next_seqno(self) -> int:
        return next(self._seqnos)

    def stamp(self, envelope: Envelope) -> Envelope:
        return replace(envelope, session=self.name, seqno=self.next_seqno(), digest=None)

    def inbox(self, suffix: str) -> str:
        return inbox(self.name, suffix)

    def hello(self, wall_us: int) -> Envelope:
        return self._heartbeat(HELLO, wall_us)

    def heartbeat(self, wall_us: int) -> Envelope:
        return self._heartbeat(HEARTBEAT, wall_us)

    def bye(self) -> Envelope:
        return self.stamp(Envelope(BYE))

    def cnonce_sent_at(self, time_us: int) -> str | None:
        """The client nonce of the heartbeat this session sent with wall time ``time_us``."""
        return self._sent.get(time_us)

    def _heartbeat(self, subject: str, wall_us: int) -> Envelope:
        while wall_us in self._sent:  # two heartbeats in one microsecond must stay distinguishable
            wall_us += 1
        beat = Heartbeat(wall_us, self.interval, secrets.token_hex(NONCE_BYTES))
        self._sent[wall_us] = beat.cnonce
        while len(self._sent) > self.KEEP_HEARTBEATS:
            self._sent.popitem(last=False)
        return self.stamp(Envelope(subject, beat.encode()))


@dataclass(slots=True)
class _Session:
    last_seen: float
    interval: float
    subjects: dict[str, float] = field(default_factory=dict)  # subject -> seconds it outlives last_seen


class SessionTable:
    """Remote sessions and their subscriptions, for a subscription manager (the cache).

    Every method that can leave a subject without subscribers returns those
    subjects, so the caller can publish ``drop``/``nosubscribers`` for them.
    """

    def __init__(self, *, default_interval: float = DEFAULT_INTERVAL, misses: int = MISSED_HEARTBEATS,
                 max_sessions: int = 100_000, max_subscriptions: int = 1_000_000) -> None:
        self.default_interval = default_interval
        self.misses = misses
        self.max_sessions = max_sessions
        self.max_subscriptions = max_subscriptions
        self._sessions: dict[str, _Session] = {}
        self._subscribers: dict[str, set[str]] = {}  # subject -> sessions
        self._subscription_count = 0
        self.refused = 0

    def __contains__(self, session: str) -> bool:
        return session in self._sessions

    def __len__(self) -> int:
        return len(self._sessions)

    def subscribers(self, subject: str) -> frozenset[str]:
        return frozenset(self._subscribers.get(subject, ()))

    def subjects_of(self, session: str) -> frozenset[str]:
        state = self._sessions.get(session)
        return frozenset(state.subjects) if state else frozenset()

    def heartbeat(self, session: str, interval: float | None, now: float) -> None:
        """A HELLO or HB: the session is alive now (and announces its interval)."""
        state = self._session(session, now)
        if state is None:
            return
        state.last_seen = now
        if interval:
            state.interval = interval

    def start(self, session: str, subject: str, expires: float | None, now: float) -> bool:
        """Record a subscription; False when a bound refused it."""
        state = self._session(session, now)
        if state is None:
            return False
        if subject not in state.subjects:
            if self._subscription_count >= self.max_subscriptions:
                self.refused += 1
                return False
            self._subscription_count += 1
            self._subscribers.setdefault(subject, set()).add(session)
        state.last_seen = now  # a request proves the session alive as much as a heartbeat does
        state.subjects[subject] = expires if expires is not None else self.misses * state.interval
        return True

    def stop(self, session: str, subject: str) -> list[str]:
        state = self._sessions.get(session)
        if state is None or subject not in state.subjects:
            return []
        del state.subjects[subject]
        return self._unsubscribe(session, [subject])

    def bye(self, session: str) -> list[str]:
        state = self._sessions.pop(session, None)
        if state is None:
            return []
        return self._unsubscribe(session, list(state.subjects))

    def expire(self, now: float) -> list[str]:
        """Drop subscriptions whose session stopped heartbeating; the subjects left without subscribers."""
        emptied: list[str] = []
        for name, state in list(self._sessions.items()):
            gone = [subject for subject, grace in state.subjects.items() if state.last_seen + grace < now]
            for subject in gone:
                del state.subjects[subject]
            emptied.extend(self._unsubscribe(name, gone))
            if not state.subjects and state.last_seen + self.misses * state.interval < now:
                del self._sessions[name]
        return emptied

    def next_deadline(self) -> float | None:
        """When :meth:`expire` may next have something to do."""
        deadlines = [
            state.last_seen + min([*state.subjects.values(), self.misses * state.interval])
            for state in self._sessions.values()
        ]
        return min(deadlines) if deadlines else None

    def _session(self, name: str, now: float) -> _Session | None:
        state = self._sessions.get(name)
        if state is None:
            if len(self._sessions) >= self.max_sessions:
                self.refused += 1
                return None
            state = self._sessions[name] = _Session(now, self.default_interval)
        return state

    def _unsubscribe(self, session: str, subjects: list[str]) -> list[str]:
        emptied = []
        for subject in subjects:
            holders = self._subscribers[subject]
            holders.discard(session)
            self._subscription_count -= 1
            if not holders:
                del self._subscribers[subject]
                emptied.append(subject)
        return emptied
