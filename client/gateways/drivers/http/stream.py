"""``GET /v1/stream/<pattern>``: one client's Server-Sent Events, with backfill after a reconnect.

A client that reconnects with ``Last-Event-ID: N`` gets the matching messages
after N that it missed, then the live stream, without a gap or a duplicate.
The live subscription starts first and holds what the gateway routes to it;
everything the gateway takes after the stream's start is routed, so the live
stream begins just after the gateway's position at that moment (or, when it
has taken nothing yet, as after a restart, at the first sequence it takes).
A :class:`~fyrehose.drivers.link.RangeLink` (the gateway's own gevent driver
of the pure connection, tracking from N+1) fetches up to there from whichever
node holds the messages (the REQUEST path ``fyrehose sub --from`` uses: the
backbone's recent log, then journals), verified as the gateway verifies; the
held messages after what it reached follow.  What cannot be had is reported
as an SSE comment (``: lost A..B (reason)``).  Held bytes are bounded by the
client's ``max_pending``, like everything else queued for a client.

With ``--users`` the stream carries its client's
:class:`~fyrehose.gateways.access.login.Login`: each event, live or
backfilled, goes out only if the user may receive its subject (a pattern may
overlap a denied subject; a re-read users file applies at the next event).
"""
from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING

import gevent

from fyrehose.drivers.backbone_io import wall_us
from fyrehose.drivers.link import RangeLink
from fyrehose.gateways.http import sse
from fyrehose.protocol.tracker import Event, Lost
from fyrehose.subjects.envelope import Envelope, is_envelope, peek_subject
from fyrehose.subjects.patterns import match
from fyrehose.subjects.session import SubjectSession

if TYPE_CHECKING:
    from fyrehose.gateways.access.login import Login
    from fyrehose.gateways.drivers.http.gateway import HttpGateway
    from fyrehose.gateways.drivers.tcp import TcpClient

log = logging.getLogger("fyrehose.gateway")


class EventStream:
    """The events of one SSE response; ``write`` frames bytes into the response body."""

    def __init__(self, client: TcpClient, gateway: HttpGateway, pattern: str,
                 write: Callable[[bytes], bytes], login: Login | None = None) -> None:
        self.client = client
        self.login = login  # None without --users: every event goes out
        self.gateway = gateway
        self.pattern = pattern
        self.write = write
        self._held: list[tuple[int, Envelope]] | None = None
        self._held_bytes = 0
        self._backfill: gevent.Greenlet | None = None
        self._fetch: RangeLink | None = None
        self._subjects: SubjectSession | None = None
        self._covered = 0  # the last sequence the backfill has sent or reported lost

    def start(self, last_event_id: int | None) -> None:
        position = self.gateway.router.position if self.gateway.router is not None else 0
        if last_event_id is not None and (last_event_id < position or position == 0):
            self._held = []
            self._backfill = gevent.spawn(self._run_backfill, last_event_id + 1, position)
        self.gateway.add_stream(self)

    def stop(self) -> None:
        self.gateway.remove_stream(self)
        if self._backfill is not None:
            self._backfill.kill(block=False)

    def deliver(self, seq: int, message: Envelope) -> None:
        if self.client.closing is not None:  # the response may be finished already: nothing more to frame
            return
        if self.login is not None and not self.login.may_receive(message.subject):
            return
        if self._held is not None:
            self._held.append((seq, message))
            self._held_bytes += len(message.data) + len(message.subject)
            if self._held_bytes > self.client.max_pending:
                self.client.slow_consumer(f"more than {self.client.max_pending} bytes held during backfill")
            return
        self.client.send(self.write(sse.event(seq, message.subject, message.data)))
        self.gateway.stats["events sent"] += 1

    def _run_backfill(self, first: int, position: int) -> None:
        """Send ``first`` up to where the live stream begins (just after ``position``; 0: not known yet),
        then what the live stream held."""
        settings = self.gateway.settings
        deadline = time.monotonic() + settings.backfill_timeout
        if position and position - first + 1 > settings.backfill_limit:
            skipped = position - settings.backfill_limit
            self._lost(first, skipped, f"backfill is limited to {settings.backfill_limit} messages")
            first = skipped + 1
        self._covered = first - 1
        end = position or None
        try:
            self._subjects = SubjectSession(credentials=settings.credentials)
            fetch = self._fetch = RangeLink(settings.backbone, self._subjects, self._backfilled, first=first,
                                            stats=Counter())
            if end is None:
                end = self._live_start(deadline)
            if end is not None:
                fetch.stop_at(end)
                fetch.done.wait(max(0.0, deadline - time.monotonic()))
            if end is None or self._covered < end:
                self._lost(self._covered + 1, end, f"backfill timed out after {settings.backfill_timeout:g} s")
        except Exception as exc:  # a backfill that fails must not end the live stream
            log.warning("%s: backfill from %d failed: %s", self.client.peer, first, exc)
            self._lost(self._covered + 1, end, f"backfill failed: {exc}")
        finally:
            self._hand_over()
            if self._fetch is not None:
                self._fetch.close()

    def _live_start(self, deadline: float) -> int | None:
        """The last sequence before the live stream, once a gateway that had taken nothing takes its first."""
        router = self.gateway.router
        if router is None or not router.started.wait(max(0.0, deadline - time.monotonic())):
            return None
        return router.first - 1

    def _hand_over(self) -> None:
        """The held messages after what the backfill covered: the live stream from here on."""
        held, self._held = self._held or [], None
        for seq, message in held:
            if seq > self._covered:  # a message both fetched and routed live goes once
                self.deliver(seq, message)

    def _backfilled(self, events: list[Event]) -> None:
        """Fetched events in sequence order: the matching messages as events, losses as comments."""
        pattern = self.pattern
        subjects = self._subjects
        assert subjects is not None  # made before the link that calls here
        verifies = subjects.auth is not None
        for event in events:
            if self._held is None:  # handed over: the live stream has it from here
                return
            if event.__class__ is Lost:
                end = self._fetch.end if self._fetch is not None else None
                to_seq = event.to_seq if end is None else min(event.to_seq, end)
                self._lost(event.from_seq, to_seq, event.reason)
                continue
            seq, data = event  # type: ignore[misc]  # a Message
            self._covered = seq
            if not is_envelope(data):
                continue  # a raw payload: no subject, no event
            subject = peek_subject(data) or ""
            wanted = match(pattern, subject) and (self.login is None or self.login.may_receive(subject))
            if not (wanted or verifies):  # verifying, every envelope counts: sessions, the trust exchange
                continue
            opened, accepted, answers = subjects.open(data, wall_us())
            if answers and self._fetch is not None:
                self._fetch.link.send_unconfirmed(answers)
            if wanted and accepted and opened is not None:
                self._send(sse.event(seq, opened.subject, opened.data))
                self.gateway.stats["events backfilled"] += 1

    def _lost(self, first: int, last: int | None, reason: str) -> None:
        """Report ``first``..``last`` (None: up to the live stream, not known) as what the backfill cannot have."""
        self._send(sse.comment(f"lost {first}..{'' if last is None else last} ({reason})"))
        if last is not None:
            self._covered = max(self._covered, last)

    def _send(self, data: bytes) -> None:
        if self.client.closing is None:
            self.client.send(self.write(data))
