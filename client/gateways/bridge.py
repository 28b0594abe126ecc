"""A gateway's one link to the backbone: publishes envelopes and fans the ordered stream out.

Every gateway process holds a single :class:`fyrehose.Client` (a BATCH
subscriber that also publishes).  Whatever any gateway or UDP client
publishes comes back through that client's ``subscribe(">")`` stream in
backbone sequence order, and :class:`Bridge` hands each enveloped message to
the gateway's ``route`` function, which queues it on the matching TCP
clients.  Local subscribers are served from that stream too, never directly
by the publishing connection, so every subscriber of every gateway sees one
order.  Raw payloads (no envelope, hence no subject) reach no gateway client.

With credentials the client runs a session, signs what the gateway publishes
for its TCP clients and verifies every envelope of the stream: forged,
tampered, replayed and unsigned messages are dropped (and counted) before
routing, so no gateway client ever receives them.

The bridge also keeps the deployment's live interest (:mod:`fyrehose.interest`):
the gateway's own subscriptions go into :attr:`Bridge.interest`, which the
client announces, and everyone's announcements, taken from the stream, fill
:attr:`Bridge.table`; :meth:`Bridge.subscribers_elsewhere` is what NATS
no-responders and Redis ``PUBLISH`` counts add to the gateway's own count.
"""
from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable

import gevent

from fyrehose.addresses import Address
from fyrehose.auth import Credentials
from fyrehose.client import Client, RequestTimeout
from fyrehose.envelope import Envelope
from fyrehose.fatal import guarded
from fyrehose.gateways.channels import is_internal, subject_to_channel
from fyrehose.interest import INTEREST_SUBJECT, InterestTable
from fyrehose.tracker import Lost

log = logging.getLogger("fyrehose.gateway")

Route = Callable[[int, Envelope], None]

# Messages the bridge may hold for the fan-out greenlet; beyond that the
# stream reports a "subscriber overrun" loss instead of growing.
MAX_QUEUED = 65536
# Messages routed between two chances for the clients' writer greenlets to run.
YIELD_EVERY = 64
EXPIRE_EVERY = 1.0  # seconds between sweeps of silent owners out of the interest table


class Bridge:
    """Publish through, and receive the ordered stream from, one backbone."""

    def __init__(self, backbone: str, route: Route, *, stats: Counter, publish_timeout: float = 5.0,
                 credentials: Credentials | None = None, session_interval: float = 2.0,
                 bind: Address | None = None) -> None:
        self.route = route
        self.stats = stats
        self.publish_timeout = publish_timeout
        self.position = 0  # the last sequence taken from the stream
        # NOJOURNAL: a gateway serves clients, not FORWARDs (journal nodes do), and keeps no history
        self.client = Client(backbone, journal=False, auth=credentials, session_interval=session_interval,
                             bind=bind)
        self._stream = self.client.subscribe(">", on_loss="yield", max_queued=MAX_QUEUED, announce=False)
        self.interest = self.client.interest  # this gateway's clients' subscriptions, announced by the client
        self.table = InterestTable(subject_to_channel)  # everyone's, from their announcements
        self._next_expiry = 0.0
        self._fan_out = gevent.spawn(guarded(self._fan_out_loop, "gateway fan-out"))

    def close(self) -> None:
        self.client.close()
        self._fan_out.join(2)

    def auth_counts(self) -> dict[str, int]:
        """What verification dropped and accepted (empty without credentials)."""
        auth = self.client.auth
        return {f"auth {name}": count for name, count in auth.stats.items()} if auth is not None else {}

    def subscribers_elsewhere(self, subject: str) -> int:
        """Subscriptions matching ``subject`` announced by every other gateway and client of the deployment."""
        return self.table.count(subject, exclude=self.interest.owner)

    def publish(self, messages: list[Envelope]) -> list[int]:
        """Publish; the sequence numbers once the backbone confirmed every message.

        Raises PayloadTooLarge (nothing sent) or a FyrehoseError (not confirmed).
        """
        seqs = self.client.publish_many(messages, timeout=self.publish_timeout)
        self.stats["published"] += len(seqs)
        return seqs

    def snapshot(self, subject: str, timeout: float) -> Envelope | None:
        """The cache's answer to ``_SNAP.<subject>``; None when no cache answered in time."""
        try:
            return self.client.snapshot(subject, timeout=timeout, retry=timeout / 4).envelope
        except RequestTimeout:
            return None

    def _fan_out_loop(self) -> None:
        stats = self.stats
        routed = 0
        for event in self._stream:
            routed += 1
            if routed % YIELD_EVERY == 0:  # let the writers hand what is queued to the kernel
                gevent.sleep(0)
            if isinstance(event, Lost):
                self.position = event.to_seq
                stats["lost"] += event.count
                log.warning("backbone messages %d..%d lost (%s)", event.from_seq, event.to_seq, event.reason)
                continue
            self.position = event.seq
            if event.envelope.subject == INTEREST_SUBJECT:
                now = time.monotonic()
                if not self.table.receive(event.envelope, now):
                    stats["bad interest announcements"] += 1
                if now >= self._next_expiry:
                    self.table.expire(now)
                    self._next_expiry = now + EXPIRE_EVERY
            if is_internal(event.envelope.subject):  # the deployment's own traffic reaches no gateway client
                continue
            try:
                self.route(event.seq, event.envelope)
            except Exception:  # one bad message must not stop the stream for everyone
                stats["route failures"] += 1
                log.exception("routing message %d failed", event.seq)
