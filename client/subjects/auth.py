"""HMAC authentication of envelopes (docs/security.md), as a pure state machine.

Every node holds a database of ``(user, service) -> HA0`` where
``HA0 = SHA256(user + service + password)``: the password itself is stored
nowhere.  A session ``user.NONCE`` signs each envelope with a key derived from
HA0 and its NONCE, over the whole envelope and bound to the session's seqno;
receivers recompute the digest from their own copy of HA0, refuse seqnos they
have already seen (a replay), and accept a session only after the HELLO trust
exchange proved that a live holder of its HA0 answered a fresh challenge.
The scheme it follows leaves its AES hash underspecified (docs/security.md,
"The scheme it follows"); this module uses SHA-256 and HMAC-SHA256
throughout.  docs/security.md gives the exact construction.

:class:`Authenticator` is the per-node state machine: :meth:`~Authenticator.sign`
for what the node publishes, :meth:`~Authenticator.check` for every envelope
it receives (which returns the verdict and the exchange messages to publish),
:meth:`~Authenticator.expire` for its timers.  No I/O happens here; the client
(:class:`fyrehose.Client` with ``auth=``) is the driver.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import struct
from collections import Counter
from dataclasses import dataclass, replace

from fyrehose.errors import InputError
from fyrehose.subjects.envelope import Envelope, decode, encode_unsigned, is_envelope
from fyrehose.subjects.session_table import (
    AUTH_SUFFIX,
    BYE,
    HEARTBEAT,
    HELLO,
    INBOX_PREFIX,
    NONCE_BYTES,
    Heartbeat,
    LocalSession,
    parse_json_object,
    parse_number,
    parse_session,
)

DIGEST_SIZE = 32
DEFAULT_WINDOW = 4096
DEFAULT_MAX_SKEW = 30.0
_U64 = struct.Struct(">Q")


class AuthError(InputError):
    """Credentials that cannot work: an unknown user, a damaged database file."""


# ---------------------------------------------------------------- the construction

def compute_ha0(user: str, service: str, password: str) -> bytes:
    """``SHA256(user + service + password)``, the only form in which a password is ever kept."""
    return hashlib.sha256((user + service + password).encode("utf-8")).digest()


def session_key(ha0: bytes, nonce: str) -> bytes:
    """HA1 of a session: ``SHA256(HA0 + NONCE)``; signs every envelope of that session."""
    return hashlib.sha256(ha0 + nonce.encode("utf-8")).digest()


def exchange_key(ha0: bytes, nonce: str, time_us: int, cnonce: str) -> bytes:
    """HA1 of a trust-exchange message: ``SHA256(HA0 + NONCE + utc_usecs + CNONCE)`` (utc_usecs as u64)."""
    return hashlib.sha256(ha0 + nonce.encode("utf-8") + _U64.pack(time_us) + cnonce.encode("utf-8")).digest()


def message_hash(envelope: Envelope) -> bytes:
    """HA2: ``SHA256(seqno as u64 + the envelope encoded without its digest)``.

    The encoding covers subject and data (as the scheme asks) and also type,
    status, reply and session, so none of them can be changed in flight.
    """
    if envelope.seqno is None:
        raise AuthError("only an envelope with a session and seqno can be signed")
    return hashlib.sha256(_U64.pack(envelope.seqno) + encode_unsigned(envelope)).digest()


def compute_digest(key: bytes, envelope: Envelope) -> bytes:
    """``HMAC-SHA256(K = HA1, MSG = HA2)``."""
    return hmac.digest(key, message_hash(envelope), "sha256")


def sign(key: bytes, envelope: Envelope) -> Envelope:
    return replace(envelope, digest=compute_digest(key, envelope))


def digest_matches(key: bytes, envelope: Envelope) -> bool:
    return envelope.digest is not None and hmac.compare_digest(compute_digest(key, envelope), envelope.digest)


# ---------------------------------------------------------------- the database

class AuthDatabase:
    """Users and services with their HA0, stored as a JSON list (docs/security.md).

    File: ``[{"user": "sam", "svc": "quotes", "hash": "<64 hex digits of HA0>"}, ...]``.
    """

    def __init__(self, entries: dict[tuple[str, str], bytes] | None = None) -> None:
        self._entries: dict[tuple[str, str], bytes] = dict(entries or {})

    @classmethod
    def from_json(cls, data: bytes, origin: str) -> AuthDatabase:
        """The database a file holds; ``origin`` (its path) names it in every error."""
        try:
            rows = json.loads(data)
        except ValueError as exc:
            raise AuthError(f"auth database {origin} is not JSON: {exc}") from None
        if not isinstance(rows, list):
            raise AuthError(f"auth database {origin} must hold a JSON list")
        entries = {}
        for number, row in enumerate(rows, 1):
            try:
                user, service, digest = row["user"], row["svc"], bytes.fromhex(row["hash"])
                _check_name(user, "user")
                _check_name(service, "service")
            except (TypeError, KeyError, ValueError) as exc:
                raise AuthError(f"auth database {origin}, entry {number}: {exc}") from None
            if len(digest) != DIGEST_SIZE:
                raise AuthError(f"auth database {origin}, entry {number}: hash must be 32 bytes of hex")
            entries[(user, service)] = digest
        return cls(entries)

    def to_json(self) -> bytes:
        rows = [{"user": u, "svc": s, "hash": h.hex()} for (u, s), h in sorted(self._entries.items())]
        return (json.dumps(rows, indent=1) + "\n").encode()

    def add(self, user: str, service: str, password: str) -> None:
        _check_name(user, "user")
        _check_name(service, "service")
        if not password:
            raise AuthError("the password must not be empty")
        self._entries[(user, service)] = compute_ha0(user, service, password)

    def remove(self, user: str, service: str) -> bool:
        return self._entries.pop((user, service), None) is not None

    def lookup(self, user: str, service: str) -> bytes | None:
        return self._entries.get((user, service))

    def users(self) -> list[tuple[str, str]]:
        return sorted(self._entries)


def _check_name(name: object, what: str) -> None:
    """Users and services are single subject tokens (a user names sessions: ``user.NONCE``)."""
    if not isinstance(name, str) or not name or len(name) > 64:
        raise AuthError(f"{what} must be a name of 1..64 characters")
    if any(ch in ".*>" or ch.isspace() for ch in name):
        raise AuthError(f"{what} {name!r} must not contain '.', '*', '>' or whitespace")


@dataclass(frozen=True, slots=True)
class Credentials:
    """What a node needs to authenticate: the database and its own user and service."""

    database: AuthDatabase
    user: str
    service: str


# ---------------------------------------------------------------- replay protection

class ReplayWindow:
    """Seqnos of one session, each accepted once (an anti-replay window, as in RFC 4303 §3.4.3).

    Anything at or below ``floor`` (the seqno at which trust was established)
    is refused, as is anything more than ``size`` below the highest seqno
    seen.  Within the window, order does not matter: a publisher's retried
    PUSH may be sequenced after its later messages and must still count.
    """

    def __init__(self, floor: int = 0, size: int = DEFAULT_WINDOW) -> None:
        self.floor = floor
        self.size = size
        self.highest = floor
        self._seen = 0  # bit i: highest - i was seen

    def accept(self, seqno: int) -> bool:
        if seqno <= self.floor:
            return False
        if seqno > self.highest:
            shift = seqno - self.highest
            self._seen = ((self._seen << shift) | 1) & ((1 << self.size) - 1) if shift < self.size else 1
            self.highest = seqno
            return True
        offset = self.highest - seqno
        if offset >= self.size or self._seen >> offset & 1:
            return False
        self._seen |= 1 << offset
        return True


# ---------------------------------------------------------------- the state machine

@dataclass(frozen=True, slots=True)
class Check:
    """The verdict on one received envelope, and exchange messages to publish because of it."""

    accepted: bool
    reason: str
    answers: tuple[Envelope, ...] = ()


@dataclass(slots=True)
class _Peer:
    key: bytes
    ha0: bytes
    nonce: str
    last_seen_us: int
    interval_us: int
    trusted: bool = False
    window: ReplayWindow | None = None
    challenge: tuple[int, str] | None = None  # (time_us, cnonce) of the exchange message we sent it


@dataclass(slots=True)
class _Exchange:
    auth_time: int
    time: int
    cnonce: str


class Authenticator:
    """One node's authentication: signs what it sends, judges what it receives.

    Reasons counted in :attr:`stats` (the ``reason`` of every :class:`Check`):
    ``accepted``, ``unsigned``, ``bad session``, ``unknown user``,
    ``bad digest`` (forged or tampered), ``replayed``, ``untrusted``,
    ``stale hello``, ``bad heartbeat``, ``bad exchange``, ``unexpected exchange``,
    ``not for us`` (another pair's exchange), ``hello`` (a heartbeat of a new
    session, answered with a challenge) and ``trusted`` (an exchange completed).
    """

    def __init__(self, credentials: Credentials, session: LocalSession, *,
                 max_skew: float = DEFAULT_MAX_SKEW, window: int = DEFAULT_WINDOW,
                 max_peers: int = 65_536) -> None:
        ha0 = credentials.database.lookup(session.user, credentials.service)
        if ha0 is None:
            raise AuthError(f"user {session.user!r} of service {credentials.service!r} is not in the auth database")
        self.database = credentials.database
        self.service = credentials.service
        self.session = session
        self.max_skew_us = int(max_skew * 1e6)
        self.window_size = window
        self.max_peers = max_peers
        self.stats: Counter[str] = Counter()
        self._ha0 = ha0
        self._key = session_key(ha0, session.nonce)
        self._own = ReplayWindow(0, window)
        self._auth_inbox = session.inbox(AUTH_SUFFIX)
        self._peers: dict[str, _Peer] = {}
        self._answered: dict[int, set[str]] = {}  # our heartbeat time -> peers whose answer to it we took

    # ------------------------------------------------------------ outgoing

    def sign(self, envelope: Envelope) -> Envelope:
        """Sign an envelope this node's session stamped (session and seqno set)."""
        if envelope.session != self.session.name or envelope.seqno is None:
            raise AuthError("sign() takes envelopes stamped by this node's session")
        return sign(self._key, envelope)

    # ------------------------------------------------------------ incoming

    def trusts(self, session: str) -> bool:
        if session == self.session.name:
            return True
        peer = self._peers.get(session)
        return peer is not None and peer.trusted

    def trusted_sessions(self) -> list[str]:
        return sorted(name for name, peer in self._peers.items() if peer.trusted)

    def vouches(self, payload: bytes) -> bool:
        """Whether a peer's re-delivery of ``payload`` may fill a hole: a signed envelope whose digest verifies.

        Read-only (no replay window moves, no peer is learnt), because the
        message is judged again by :meth:`check` when its turn in the sequence
        comes.  Without it a forged copy racing the genuine re-delivery would
        fill the hole first and the genuine message would be lost unreported.
        Exchange messages between two other sessions are keyed by nonces only
        those two know; they are taken on trust here and refused later as
        ``not for us`` all the same.
        """
        opened = decode(payload) if is_envelope(payload) else None
        if opened is None or opened.session is None or opened.seqno is None or opened.digest is None:
            return False
        subject = opened.subject
        if subject.startswith(INBOX_PREFIX) and subject.endswith("." + AUTH_SUFFIX):
            return subject != self._auth_inbox or self._exchange_digest_matches(opened)
        if opened.session == self.session.name:
            return digest_matches(self._key, opened)
        peer = self._peers.get(opened.session)
        if peer is not None:
            return digest_matches(peer.key, opened)
        try:
            user, nonce = parse_session(opened.session)
        except ValueError:
            return False
        ha0 = self.database.lookup(user, self.service)
        return ha0 is not None and digest_matches(session_key(ha0, nonce), opened)

    def _exchange_digest_matches(self, envelope: Envelope) -> bool:
        """An exchange message to our inbox, checked with the nonces it must be bound to (as in :meth:`_exchange`)."""
        assert envelope.session is not None  # checked signed by the caller
        try:
            user, nonce = parse_session(envelope.session)
            auth_time = int(parse_number(parse_json_object(envelope.data).get("auth_time"), "auth_time",
                                         integer=True))
        except ValueError:
            return False
        ha0 = self.database.lookup(user, self.service)
        if ha0 is None:
            return False
        cnonces = [self.session.cnonce_sent_at(auth_time)]
        peer = self._peers.get(envelope.session)
        if peer is not None and peer.challenge is not None and peer.challenge[0] == auth_time:
            cnonces.append(peer.challenge[1])
        return any(cnonce is not None and digest_matches(exchange_key(ha0, nonce, auth_time, cnonce), envelope)
                   for cnonce in cnonces)

    def check(self, envelope: Envelope, wall_us: int) -> Check:
        result = self._check(envelope, wall_us)
        self.stats[result.reason] += 1
        return result

    def expire(self, wall_us: int) -> None:
        """Forget sessions silent for three heartbeat intervals (and unfinished exchanges past the skew)."""
        for name, peer in list(self._peers.items()):
            limit = 3 * peer.interval_us if peer.trusted else max(3 * peer.interval_us, self.max_skew_us)
            if wall_us - peer.last_seen_us > limit:
                del self._peers[name]

    def _check(self, envelope: Envelope, wall_us: int) -> Check:
        name, seqno = envelope.session, envelope.seqno
        if name is None or seqno is None or envelope.digest is None:
            return Check(False, "unsigned")
        subject = envelope.subject
        exchange = subject.startswith(INBOX_PREFIX) and subject.endswith("." + AUTH_SUFFIX)
        if exchange and subject != self._auth_inbox:
            return Check(False, "not for us")  # another pair's exchange (our own answers included)
        if name == self.session.name and not exchange:
            if not digest_matches(self._key, envelope):
                return Check(False, "bad digest")
            return Check(True, "accepted") if self._own.accept(seqno) else Check(False, "replayed")
        try:
            user, nonce = parse_session(name)
        except ValueError:
            return Check(False, "bad session")
        ha0 = self.database.lookup(user, self.service)
        if ha0 is None:
            return Check(False, "unknown user")
        if exchange:
            return self._exchange(envelope, ha0, nonce, wall_us)
        peer = self._peers.get(name)
        key = peer.key if peer is not None else session_key(ha0, nonce)
        if not digest_matches(key, envelope):
            return Check(False, "bad digest")
        if peer is None or not peer.trusted:
            if subject in (HELLO, HEARTBEAT):
                return self._challenge(envelope, peer, key, ha0, nonce, wall_us)
            return Check(False, "untrusted")
        assert peer.window is not None  # a trusted peer always has a replay window
        if not peer.window.accept(seqno):
            return Check(False, "replayed")
        peer.last_seen_us = wall_us
        if subject == HEARTBEAT:
            try:
                peer.interval_us = int(Heartbeat.decode(envelope.data).interval * 1e6)
            except ValueError:
                pass  # a signed but odd heartbeat still proves the session alive
        elif subject == BYE:
            del self._peers[name]
        return Check(True, "accepted")

    def _challenge(self, envelope: Envelope, peer: _Peer | None, key: bytes, ha0: bytes, nonce: str,
                   wall_us: int) -> Check:
        """A genuine heartbeat of a session we do not trust yet: prove ourselves to it, bound to its cnonce."""
        try:
            beat = Heartbeat.decode(envelope.data)
        except ValueError:
            return Check(False, "bad heartbeat")
        if abs(wall_us - beat.time_us) > self.max_skew_us:
            return Check(False, "stale hello")
        interval_us = max(int(beat.interval * 1e6), 1)
        name = envelope.session
        assert name is not None  # _check answered "unsigned" otherwise
        if peer is None:
            if len(self._peers) >= self.max_peers:
                self._evict_untrusted()
            peer = self._peers[name] = _Peer(key, ha0, nonce, wall_us, interval_us)
        peer.last_seen_us = wall_us
        peer.interval_us = interval_us
        if peer.challenge is not None and wall_us - peer.challenge[0] < interval_us:
            return Check(False, "hello")  # challenged within this interval already
        answer, sent = self._exchange_message(name, beat.time_us, beat.cnonce, wall_us)
        peer.challenge = sent
        return Check(False, "hello", (answer,))

    def _exchange(self, envelope: Envelope, ha0: bytes, nonce: str, wall_us: int) -> Check:
        """A message on our ``.auth`` inbox: either a peer answering our heartbeat, or answering our challenge."""
        try:
            value = parse_json_object(envelope.data)
            auth_time = int(parse_number(value.get("auth_time"), "auth_time", integer=True))
            their_time = int(parse_number(value.get("time"), "time", integer=True))
            cnonce = value.get("cnonce")
            if not isinstance(cnonce, str) or not 0 < len(cnonce) <= 64:
                raise ValueError("cnonce")
            exchange = _Exchange(auth_time, their_time, cnonce)
        except ValueError:
            return Check(False, "bad exchange")
        name, seqno = envelope.session, envelope.seqno
        assert name is not None and seqno is not None  # _check answered "unsigned" otherwise
        peer = self._peers.get(name)
        ours = self.session.cnonce_sent_at(exchange.auth_time)
        if ours is not None:
            if not digest_matches(exchange_key(ha0, nonce, exchange.auth_time, ours), envelope):
                return Check(False, "bad digest")
            answered = self._answered.setdefault(exchange.auth_time, set())
            if name in answered:  # each heartbeat's cnonce proves a peer once: no re-trust by replay
                return Check(False, "replayed")
            answered.add(name)
            for stale in [t for t in self._answered if self.session.cnonce_sent_at(t) is None]:
                del self._answered[stale]
            if peer is None or not peer.trusted:
                peer = self._trust(name, peer, ha0, nonce, seqno, wall_us)
            answer, _ = self._exchange_message(name, exchange.time, exchange.cnonce, wall_us)
            return Check(True, "trusted", (answer,))
        if peer is not None and peer.challenge is not None and peer.challenge[0] == exchange.auth_time:
            if not digest_matches(exchange_key(ha0, nonce, exchange.auth_time, peer.challenge[1]), envelope):
                return Check(False, "bad digest")
            if not peer.trusted:
                self._trust(name, peer, ha0, nonce, seqno, wall_us)
            peer.challenge = None
            return Check(True, "trusted")
        return Check(False, "unexpected exchange")

    def _trust(self, name: str, peer: _Peer | None, ha0: bytes, nonce: str, seqno: int, wall_us: int) -> _Peer:
        if peer is None:
            if len(self._peers) >= self.max_peers:
                self._evict_untrusted()
            peer = self._peers[name] = _Peer(session_key(ha0, nonce), ha0, nonce, wall_us,
                                             int(self.session.interval * 1e6))
        peer.trusted = True
        peer.window = ReplayWindow(seqno, self.window_size)  # nothing older than the exchange is accepted
        peer.last_seen_us = wall_us
        return peer

    def _exchange_message(self, to: str, auth_time: int, their_cnonce: str, wall_us: int) -> tuple[Envelope, tuple[int, str]]:
        cnonce = secrets.token_hex(NONCE_BYTES)
        data = json.dumps({"auth_time": auth_time, "time": wall_us, "cnonce": cnonce}, separators=(",", ":"))
        unsigned = self.session.stamp(Envelope(f"{INBOX_PREFIX}{to}.{AUTH_SUFFIX}", data.encode()))
        key = exchange_key(self._ha0, self.session.nonce, auth_time, their_cnonce)
        return sign(key, unsigned), (wall_us, cnonce)

    def _evict_untrusted(self) -> None:
        for name, peer in self._peers.items():
            if not peer.trusted:
                del self._peers[name]
                return
        self._peers.pop(next(iter(self._peers)))
