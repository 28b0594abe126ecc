"""A client's timers in one place: one deadline and one call for everything a driver runs on time.

A client's pure state has three timed parts: the
:class:`~fyrehose.protocol.connection.BackboneConnection` (KEEPALIVEs, gap
REQUESTs, holes given up), its
:class:`~fyrehose.protocol.publishing.PendingPublishes` (unconfirmed PUSHes sent
again, batches past their deadline) and, for a client that speaks in
subjects, the :class:`~fyrehose.subjects.session.SubjectSession` (heartbeats,
interest announcements, the trust table's expiry).  :class:`ClientCore` puts
them behind aioquic's timer contract: a driver asks :meth:`ClientCore.next_deadline`
how long it may wait, and calls :meth:`ClientCore.handle_timers` once that time
has come; what is due comes back as one :class:`Due`.  No socket, thread or
clock: the driver passes the time in.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from fyrehose.protocol import codec
from fyrehose.protocol.connection import BackboneConnection
from fyrehose.protocol.publishing import Finished
from fyrehose.protocol.tracker import Event
from fyrehose.subjects.session import SubjectSession


@dataclass(slots=True)
class Due:
    """What the timers asked for at one moment, in the order a driver applies it."""

    datagrams: list[bytes] = field(default_factory=list)  # for the backbone: KEEPALIVE, REQUESTs, PUSHes (resent, session's)
    finished: list[Finished] = field(default_factory=list)  # publish batches whose deadline passed unconfirmed
    events: list[Event] = field(default_factory=list)  # losses (and what waited behind them) from holes given up


class ClientCore:
    """The timers of ``connection``, its publishes and (when given) the subject ``session``, as one."""

    __slots__ = ("connection", "publishes", "session")

    def __init__(self, connection: BackboneConnection, session: SubjectSession | None = None) -> None:
        self.connection = connection
        self.publishes = connection.publishes
        self.session = session

    def next_deadline(self) -> float:
        """When :meth:`handle_timers` next has something to do (the connection's deadline covers its publishes)."""
        deadline = self.connection.next_deadline()
        if self.session is not None:
            return min(deadline, self.session.next_deadline())
        return deadline

    def handle_timers(self, now: float, wall_us: int = 0) -> Due:
        """Run every timer due at ``now`` (``wall_us``: the wall clock the session's heartbeats carry).

        The session's payloads go out as unconfirmed PUSHes (control messages
        whose loss a later heartbeat or announcement repairs).
        """
        datagrams, events = self.connection.handle_timers(now)
        resends, finished = self.publishes.handle_timers(now)
        if resends:
            datagrams += resends
        if self.session is not None:
            for payload in self.session.handle_timers(now, wall_us):
                datagrams.append(codec.encode_push(payload))
        return Due(datagrams, finished, events)
