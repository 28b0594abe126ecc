"""What a pure gateway connection asks of its driver, and what it reads of the gateway around it.

A connection never waits.  What only the backbone or the cache can answer
leaves it as a request carrying a token: :class:`Publish` (the driver
publishes the payloads as one confirmed batch with every other connection's
of the same loop turn, then calls the connection's ``published(token,
seqs)`` or ``failed(token, reason)``) and :class:`Snapshot` (the cache's last
value, then ``answered(token, envelope or None)``) and :class:`Verify` (a
client's credential checked against the users file off the loop, then
``verified(token, user or None)``).  The connection holds
the replies that depend on them (:mod:`fyrehose.gateways.outbox`) and goes
on with its client meanwhile.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from fyrehose.gateways.access.users import Credential, UsersFile
from fyrehose.subjects.interest import LocalInterest


@dataclass(slots=True)
class Publish:
    """Publish ``payloads`` (envelopes encoded by :mod:`fyrehose.gateways.payloads`, not yet stamped or signed),
    in order, as confirmed publishes; report their sequence numbers or the failure."""

    token: int
    payloads: list[bytes]


@dataclass(slots=True)
class Snapshot:
    """The cache's record of ``subject`` (``_SNAP.<subject>``), or None when no cache answered within ``timeout``."""

    token: int
    subject: str
    timeout: float


@dataclass(slots=True)
class Verify:
    """Check ``credential`` against ``users`` (a slow hash: the driver runs it off the gateway's loop)."""

    token: int
    users: UsersFile
    credential: Credential


class Deployment(Protocol):
    """What a connection reads of the gateway's place in the deployment (the router's state, no I/O)."""

    @property
    def interest(self) -> LocalInterest:
        """The gateway's announced subscriptions, which a connection's SUBSCRIBEs add to."""

    @property
    def position(self) -> int:
        """The last sequence the gateway took from the stream."""

    def subscribers_elsewhere(self, subject: str) -> int:
        """Subscriptions matching ``subject`` that every other gateway and client announced."""
