"""What routes a gateway's stream: publishes envelopes and fans the ordered stream out to its clients.

Every gateway process holds one :class:`~fyrehose.drivers.link.BackboneLink`
(the gevent driver of the pure backbone connection; no threads, no monkey
patching) subscribed to the whole stream, the router's (an SSE backfill opens
a :class:`~fyrehose.drivers.link.RangeLink` of its own for the range it
catches up on).  Whatever any gateway or UDP
client publishes comes back through it in backbone sequence order, and
:class:`GatewayRouter` hands each enveloped message to the gateway's ``route``
function, which queues it on the matching TCP clients (a gateway's
``route_plain``, when it has one and nothing is verified, first gets the
encoded envelope of a message not on the deployment's own subjects: the
NATS gateway frames a plain message from those bytes without decoding it).  Local subscribers
are served from that stream too, never directly by the publishing
connection, so every subscriber of every gateway sees one order.  Raw
payloads (no envelope, hence no subject) reach no gateway client.

Only what someone here can want is opened: the message is decoded, verified
and routed only when the gateway's ``wants`` says a local subscription may
match its subject, or when it is the deployment's own business (interest
announcements, this gateway's inboxes, and with credentials the session
messages of the trust exchange).  A datagram that continues the stream is
taken whole: :func:`fyrehose.subjects.selection.wanted` reads its frames'
subjects in one compiled loop and looks each up in the verdicts remembered
per subject, so a message nobody here wants (a gateway's own publishes on
their way back, most of all) becomes no Python object at all.  The verdicts
are forgotten whenever the gateway's interest changes (every subscription
of every protocol passes through it), before the next datagram is chosen.

With credentials the link runs a session, signs what the gateway publishes
for its TCP clients and verifies every envelope it opens: forged, tampered,
replayed and unsigned messages are dropped (and counted) before routing, so
no gateway client ever receives them.

:attr:`GatewayRouter.position` is the last sequence taken from the stream, routed
or not, and :attr:`GatewayRouter.first` the first (:attr:`GatewayRouter.started` is set
then): a local subscription added now receives every matching message after
``position``, or from ``first`` on when nothing was taken yet, which is where
an SSE backfill hands over to the live stream.

The router also keeps the deployment's live interest (:mod:`fyrehose.subjects.interest`):
the gateway's own subscriptions go into :attr:`GatewayRouter.interest`, which the
link announces, and everyone's announcements, taken from the stream, fill
:attr:`GatewayRouter.table`; :meth:`GatewayRouter.subscribers_elsewhere` is what NATS
no-responders and Redis ``PUBLISH`` counts add to the gateway's own count.
"""
from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import gevent
from gevent.event import Event as GeventEvent

from fyrehose.drivers.backbone_io import wall_us
from fyrehose.drivers.link import BackboneLink, Done
from fyrehose.gateways.channels import is_internal, subject_to_channel
from fyrehose.protocol.codec import Address
from fyrehose.protocol.frame_run import FrameRun
from fyrehose.protocol.tracker import Event, Lost
from fyrehose.subjects.auth import Credentials
from fyrehose.subjects.envelope import FIXED_SIZE, Envelope, peek_subject
from fyrehose.subjects.interest import INTEREST_SUBJECT, InterestTable
from fyrehose.subjects.selection import wanted
from fyrehose.subjects.session import SubjectSession
from fyrehose.subjects.session_table import SNAP_PREFIX
from fyrehose.subjects.snapshots import WITH_SEQUENCE

log = logging.getLogger("fyrehose.gateway")

Route = Callable[[int, Envelope], None]
RoutePlain = Callable[[int, bytes], bool]
Wants = Callable[[str], bool]

# Messages taken from the stream between two chances for the loop to serve the clients
# (never between a route's ``wants`` and the route itself; from the link's round, which runs in the
# loop's own callback, the chance comes once the datagram being routed is done).
YIELD_EVERY = 64
EXPIRE_EVERY = 1.0  # seconds between sweeps of silent owners out of the interest table
SESSION_PREFIX = "_SESSION."
_UNDERSCORE = ord("_")
MAX_COUNTS_REMEMBERED = 4096  # subjects whose deployment-wide subscriber count is kept between announcements


def _everything(subject: str) -> bool:
    return True


class GatewayRouter:
    """Publish through, and receive the ordered stream from, one backbone.

    ``wants(subject)`` tells whether a message on ``subject`` may reach a
    local client (False only when it surely cannot); without it every
    enveloped message is routed.
    """

    def __init__(self, backbone: str, route: Route, *, stats: Counter, publish_timeout: float = 5.0,
                 credentials: Credentials | None = None, session_interval: float = 2.0,
                 bind: Address | None = None, wants: Wants | None = None,
                 multicast: Address | None = None, route_plain: RoutePlain | None = None) -> None:
        self.route = route
        self.wants = wants or _everything
        self.stats = stats
        self.publish_timeout = publish_timeout
        self.position = 0  # the last sequence taken from the stream, routed or not
        self.first = 0  # the first sequence taken: everything from here on is routed
        self.started = GeventEvent()  # set once the first sequence is known
        self.subjects = SubjectSession(credentials=credentials, interval=session_interval, stats=stats)
        self.session = self.subjects.session
        self.interest = self.subjects.interest  # this gateway's clients' subscriptions, announced by the link
        self.table = InterestTable(subject_to_channel)  # everyone's, from their announcements
        self._inbox_prefix = self.subjects.inbox_prefix
        self._verifies = self.subjects.auth is not None
        # a plain message routed from its encoded envelope, when nothing is verified and the gateway can
        self._route_plain = route_plain if not self._verifies else None
        self._waiters: dict[str, _Snapshot] = {}  # inbox -> the request it answers
        self.ready: list = []  # drivers whose connection's outbox the stream made ready: written after routing
        self._writes_queued = False
        self._elsewhere: dict[str, int] = {}  # subject -> subscribers_elsewhere, until the table changes
        self._next_expiry = 0.0
        self._taken = 0
        self._verdicts: dict[bytes, bool] = {}  # subject -> whether a message on it is opened here
        self._verdicts_version = self.interest.version  # the interest they were decided under
        # the link's receive loop may route the first messages while its constructor still waits for the backbone:
        # the subject layer's answers to them (a session's verification) wait here until the link exists
        self._early_answers: list[bytes] | None = []
        self.link = BackboneLink(backbone, self.subjects, self._take, stats=stats,
                                 publish_timeout=publish_timeout, bind=bind, multicast=multicast,
                                 on_runs=self._take_runs)
        early, self._early_answers = self._early_answers, None
        if early:
            self.link.send_unconfirmed(early)

    def close(self) -> None:
        self.link.close()

    @property
    def reachable(self) -> bool:
        """Whether the backbone answered a KEEPALIVE within the last 5 s (a health check's answer)."""
        return self.link.reachable

    def auth_counts(self) -> dict[str, int]:
        """What verification dropped and accepted (empty without credentials)."""
        auth = self.subjects.auth
        return {f"auth {name}": count for name, count in dict(auth.stats).items()} if auth is not None else {}

    def subscribers_elsewhere(self, subject: str) -> int:
        """Subscriptions matching ``subject`` announced by every other gateway and client of the deployment.

        Remembered per subject until the next announcement or expiry changes the table (every
        PUBLISH of a Redis client and every NATS request asks).
        """
        count = self._elsewhere.get(subject)
        if count is None:
            if len(self._elsewhere) >= MAX_COUNTS_REMEMBERED:
                self._elsewhere.clear()
            count = self._elsewhere[subject] = self.table.count(subject, exclude=self.interest.owner)
        return count

    def publish(self, messages: list[Envelope]) -> list[int]:
        """Publish; the sequence numbers once the backbone confirmed every message.

        Raises PayloadTooLarge (nothing sent) or a FyrehoseError (not confirmed).
        """
        seal = self.subjects.seal
        seqs = self.link.publish([seal(message) for message in messages])
        self.stats["published"] += len(seqs)
        return seqs

    def publish_with(self, payloads: list[bytes], done: Done) -> None:
        """Publish encoded envelopes (:mod:`fyrehose.gateways.payloads`) without waiting: ``done(seqs, None)`` once
        the backbone confirmed every message, ``done(None, error)`` if it did not.

        ``done`` runs on the loop (with every other publisher's of the same
        CONFIRM).  Raises PayloadTooLarge, or a FyrehoseError when the backbone
        is unreachable, at once.
        """
        if self.session is not None:  # without a session seal_payload would hand each payload back as it is
            payloads = [self.subjects.seal_payload(payload) for payload in payloads]
        stats = self.stats

        def counted(seqs: list[int] | None, error: Exception | None) -> None:
            if seqs:
                stats["published"] += len(seqs)
            done(seqs, error)

        self.link.submit_with(payloads, counted)

    def snapshot_with(self, subject: str, timeout: float, done: Callable[[Envelope | None], None]) -> None:
        """Ask the cache for ``_SNAP.<subject>`` without waiting: ``done`` gets its answer, under ``subject``, or
        None when no cache answered within ``timeout``.

        Asked again on a fresh inbox every quarter of ``timeout``, by a timer
        on the loop (no greenlet waits for it).  The answer carries the record's
        sequence (:func:`fyrehose.subjects.snapshots.record_sequence`).
        """
        _Snapshot(self, subject, timeout, done).ask()

    def _ask_cache(self, subject: str, reply: str, waiter: _Snapshot) -> None:
        self._waiters[reply] = waiter
        self.link.send_unconfirmed([self.subjects.seal(Envelope(SNAP_PREFIX + subject, WITH_SEQUENCE, reply=reply))])

    # ------------------------------------------------------------ the stream, in sequence order

    def _take(self, events: list[Event]) -> None:
        """Messages one by one: what did not continue the stream (holes filled, re-deliveries) and losses."""
        if not self.first:
            self._start(events[0])
        stats = self.stats
        for event in events:
            if event.__class__ is Lost:
                self.position = event.to_seq
                stats["lost"] += event.count
                log.warning("backbone messages %d..%d lost (%s)", event.from_seq, event.to_seq,
                            event.reason)
                continue
            self._taken += 1
            if self._taken % YIELD_EVERY == 0:  # let the loop write what is queued, and read the clients
                self._queue_writes()
                self._serve_clients()
            seq, data = event  # type: ignore[misc]  # a Message
            subject = peek_subject(data)
            if subject and self._may_want(subject):
                self._open_and_route(seq, data)
            self.position = seq  # routed: echo filters may forget numbers up to here
        self._queue_writes()

    def _take_runs(self, runs: list[FrameRun]) -> None:
        """Whole datagrams that continue the stream: only their wanted messages become payloads."""
        if not self.first:
            self.first = runs[0].first
            self.started.set()
        for run in runs:
            low = run.first
            while low <= run.last:
                low = self._route_chosen(run, low)
            self.position = run.last
        self._queue_writes()

    def _route_chosen(self, run: FrameRun, low: int) -> int:
        """Route the messages from ``low`` on that the verdicts choose; where to choose again when the interest
        changed while the loop served the clients (past the run's last: done)."""
        version = self.interest.version
        if version != self._verdicts_version:
            self._verdicts.clear()
            self._verdicts_version = version
        for seq, data in wanted(run.data, run.first, run.step, run.spans, low, self._verdicts, self._decide):
            self._taken += 1
            if self._taken % YIELD_EVERY == 0:  # let the loop write what is queued, and read the clients
                self.position = seq - 1  # a subscription made now gets everything after it
                self._queue_writes()
                if self._serve_clients() and self.interest.version != version:
                    return seq
            self._open_and_route(seq, data)
            self.position = seq
        return run.last + 1

    def _serve_clients(self) -> bool:
        """Let the loop serve the clients: at once from a greenlet (True), or, from the loop's own callback (the
        link's receive round, which cannot pause), once the datagram being routed is done (False)."""
        hub = gevent.get_hub()
        if gevent.getcurrent() is hub:
            self.link.end_round()
            return False
        gevent.sleep(0)
        return True

    def _queue_writes(self) -> None:
        """Write the connections the stream gave something, once, in this loop iteration (all of them together)."""
        if self.ready and not self._writes_queued:
            self._writes_queued = True
            gevent.get_hub().loop.run_callback(self._write_ready)

    def _write_ready(self) -> None:
        self._writes_queued = False
        ready = self.ready[:]
        self.ready.clear()  # the same list: every outbox holds it
        for driver in ready:
            driver.write_ready()

    def _decide(self, subject: bytes) -> bool:
        """Whether to open messages on ``subject`` (the verdict remembered until the interest changes)."""
        try:
            return self._may_want(subject.decode("utf-8"))
        except UnicodeDecodeError:  # no subject at all, as peek_subject reads none
            return False

    def _may_want(self, subject: str) -> bool:
        if subject[0] == "_":  # the deployment's own subjects, and clients' inboxes
            return (subject == INTEREST_SUBJECT or subject.startswith(self._inbox_prefix)
                    or (self._verifies and subject.startswith(SESSION_PREFIX)) or self.wants(subject))
        return self.wants(subject)

    def _start(self, event: Event) -> None:
        self.first = event.from_seq if event.__class__ is Lost else event.seq  # type: ignore[union-attr]
        self.started.set()

    def _open_and_route(self, seq: int, data: bytes) -> None:
        route_plain = self._route_plain
        # the deployment's own subjects (an underscore first) always go the decoded way, past _special
        if route_plain is not None and len(data) > FIXED_SIZE and data[FIXED_SIZE] != _UNDERSCORE:
            try:
                if route_plain(seq, data):
                    return
            except Exception:  # one bad message must not stop the stream for everyone
                self.stats["route failures"] += 1
                log.exception("routing message %d failed", seq)
                return
        opened, accepted, answers = self.subjects.open(data, wall_us() if self._verifies else 0)  # the clock: for auth
        if answers:
            if self._early_answers is not None:
                self._early_answers += answers
            else:
                self.link.send_unconfirmed(answers)
        if opened is None or not accepted:
            return
        self._special(opened)
        if opened.subject[0] == "_" and is_internal(opened.subject):  # the deployment's own: for no gateway client
            return
        try:
            self.route(seq, opened)
        except Exception:  # one bad message must not stop the stream for everyone
            self.stats["route failures"] += 1
            log.exception("routing message %d failed", seq)

    def _special(self, opened: Envelope) -> None:
        """What the router itself takes from the stream: announcements and answers to its inboxes."""
        subject = opened.subject
        if subject == INTEREST_SUBJECT:
            now = time.monotonic()
            if not self.table.receive(opened, now):
                self.stats["bad interest announcements"] += 1
            if now >= self._next_expiry:
                self.table.expire(now)
                self._next_expiry = now + EXPIRE_EVERY
            self._elsewhere.clear()
            return
        waiter = self._waiters.get(subject)
        if waiter is not None:
            waiter.answered(opened)


class _Snapshot:
    """One request to the cache: its inboxes, its retry timer, and who is told the answer (once)."""

    def __init__(self, router: GatewayRouter, subject: str, timeout: float,
                 done: Callable[[Envelope | None], None]) -> None:
        self.router = router
        self.subject = subject
        self.interval = timeout / 4
        self.deadline = time.monotonic() + timeout
        self.done: Callable[[Envelope | None], None] | None = done
        self.inboxes: list[str] = []
        self.timer: Any = None

    def ask(self) -> None:
        """Ask (again) on a fresh inbox, and wake at the next retry or the deadline."""
        router = self.router
        reply = router.subjects.new_inbox()
        self.inboxes.append(reply)
        try:
            router._ask_cache(self.subject, reply, self)
        except Exception:  # a request the backbone cannot carry: nobody can answer it
            log.exception("asking the cache for %s failed", self.subject)
            self.finish(None)
            return
        wait = max(0.0, min(self.interval, self.deadline - time.monotonic()))
        self.timer = gevent.get_hub().loop.timer(wait)
        self.timer.start(gevent.spawn, self._retry_due)  # a retry may wait to send: in a greenlet, not the hub

    def _retry_due(self) -> None:
        if self.done is None:
            return
        if time.monotonic() >= self.deadline:
            self.finish(None)
        else:
            self.ask()

    def answered(self, found: Envelope) -> None:
        if self.done is not None:
            self.finish(replace(found, subject=self.subject))

    def finish(self, answer: Envelope | None) -> None:
        done, self.done = self.done, None
        if self.timer is not None:
            self.timer.close()
        for name in self.inboxes:
            self.router._waiters.pop(name, None)
        if done is not None:
            done(answer)
