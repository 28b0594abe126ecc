"""A client's duties above the backbone protocol, as a pure machine: envelopes out, envelopes in, timers.

Every driver of a :class:`~fyrehose.protocol.connection.BackboneConnection` that
speaks in subjects owes the deployment the same things: stamp what it sends
with its session and sign it (with credentials), verify what it receives and
answer the trust exchange, send HELLO, heartbeats and BYE, and announce its
interest; its timers have a deadline (:meth:`SubjectSession.next_deadline`) like the
connection's.  They live here once, with no socket, thread or clock, so the
threaded :class:`fyrehose.Client` and the gateways' gevent driver
(:mod:`fyrehose.drivers.link`) do them identically.  Each method returns
the payloads to PUSH without confirmation (control messages whose loss a
later heartbeat or announcement repairs).
"""
from __future__ import annotations

import itertools
import secrets
from collections import Counter

from fyrehose.protocol import codec
from fyrehose.subjects import envelope
from fyrehose.subjects.auth import Authenticator, Credentials
from fyrehose.subjects.envelope import Envelope
from fyrehose.subjects.interest import LocalInterest
from fyrehose.subjects.session_table import DEFAULT_INTERVAL, LocalSession, inbox


class SubjectSession:
    """One client's session name, signing key, trust exchange and interest announcements.

    ``user`` starts a session (HELLO, heartbeats, BYE); ``credentials``
    implies one for their user and signs and verifies.  Without either the
    client is anonymous: its inboxes and announcements carry a random owner.
    """

    def __init__(self, *, user: str | None = None, credentials: Credentials | None = None,
                 interval: float = DEFAULT_INTERVAL, stats: Counter[str] | None = None) -> None:
        if credentials is not None:
            if user is not None and user != credentials.user:
                raise ValueError(f"user {user!r} differs from the credentials' user {credentials.user!r}")
            user = credentials.user
        self.stats: Counter[str] = stats if stats is not None else Counter()
        session = LocalSession(user, interval) if user is not None else None
        self.session: LocalSession | None = session
        # credentials imply a session (their user is the user), so ``session`` is not None with them
        self.auth: Authenticator | None = (Authenticator(credentials, session)
                                           if credentials is not None and session is not None else None)
        self.owner = self.session.name if self.session is not None else secrets.token_hex(8)
        self.interest = LocalInterest(self.owner, interval)  # announced on _INTEREST.ANNOUNCE
        self._inbox_numbers = itertools.count(1)
        self._next_heartbeat = float("inf")
        self._next_auth_expiry = 0.0

    def new_inbox(self) -> str:
        """A fresh ``_INBOX.<owner>.<n>`` reply subject."""
        return inbox(self.owner, str(next(self._inbox_numbers)))

    @property
    def inbox_prefix(self) -> str:
        """What every inbox of this client starts with (the trust exchange's included)."""
        return inbox(self.owner, "x")[:-1]

    # ------------------------------------------------------------ outgoing

    def seal(self, outgoing: Envelope) -> bytes:
        """The envelope's bytes, stamped with this client's session (if any) and signed (with credentials)."""
        if self.session is not None:
            outgoing = self.session.stamp(outgoing)
        return self.finish(outgoing)

    def seal_payload(self, payload: bytes) -> bytes:
        """An encoded envelope sealed as :meth:`seal` seals one: as it is for a client without a session (nothing
        to stamp), decoded, stamped and signed otherwise; EnvelopeError when it is no envelope."""
        if self.session is None:
            return payload
        opened = envelope.decode(payload)
        if opened is None:
            raise envelope.EnvelopeError("not an envelope: nothing to stamp")
        return self.seal(opened)

    def finish(self, stamped: Envelope) -> bytes:
        """An already stamped envelope's bytes, signed; PayloadTooLarge beyond one message."""
        if self.auth is not None:
            stamped = self.auth.sign(stamped)
        payload = envelope.encode(stamped)
        if len(payload) > codec.MAX_PAYLOAD:
            raise codec.PayloadTooLarge(len(payload))
        return payload

    def start(self, now: float, wall_us: int) -> list[bytes]:
        """The session's HELLO, once the backbone answered; heartbeats follow from :meth:`handle_timers`."""
        if self.session is None:
            return []
        self._next_heartbeat = now + self.session.interval
        return [self.finish(self.session.hello(wall_us))]

    def next_deadline(self) -> float:
        """When :meth:`handle_timers` next has something to do (at once: an interest changed since it last ran)."""
        deadline = self.interest.next_deadline()
        if self.session is not None:
            deadline = min(deadline, self._next_heartbeat)
        if self.auth is not None:
            deadline = min(deadline, self._next_auth_expiry)
        return deadline

    def handle_timers(self, now: float, wall_us: int) -> list[bytes]:
        """What is due now: a heartbeat, an interest announcement (and the trust table's expiry)."""
        out: list[bytes] = []
        if self.session is not None and now >= self._next_heartbeat:
            out.append(self.finish(self.session.heartbeat(wall_us)))
            self._next_heartbeat = now + self.session.interval
        if self.auth is not None and now >= self._next_auth_expiry:
            self.auth.expire(wall_us)
            self._next_auth_expiry = now + 1.0
        if self.interest.due(now):
            out.append(self.seal(self.interest.announcement(now)))
        return out

    def leave(self) -> list[bytes]:
        """Leaving: the interest's leave announcement and the session's BYE."""
        out: list[bytes] = []
        leave = self.interest.leave()
        if leave is not None:
            out.append(self.seal(leave))
        if self.session is not None:
            out.append(self.finish(self.session.bye()))
        return out

    # ------------------------------------------------------------ incoming

    def open(self, payload: bytes, wall_us: int) -> tuple[Envelope | None, bool, list[bytes]]:
        """An enveloped message of the stream: (its envelope, whether to deliver it, exchange answers to send).

        A damaged envelope is counted; with credentials it is dropped, and so
        is every envelope that fails verification (counted as ``refused``).
        """
        opened = envelope.decode(payload)
        if opened is None:
            self.stats["damaged envelopes"] += 1
            return None, self.auth is None, []
        if self.auth is None:
            return opened, True, []
        check = self.auth.check(opened, wall_us)
        answers = [envelope.encode(answer) for answer in check.answers]
        if not check.accepted:
            self.stats["refused"] += 1
        return opened, check.accepted, answers
