"""``GET /v1/stream/<pattern>``: one client's Server-Sent Events, with backfill after a reconnect.

A client that reconnects with ``Last-Event-ID: N`` gets the matching messages
after N that it missed, then the live stream, without a gap or a duplicate:
the live subscription starts first and holds what it routes while a backfill
client (:class:`fyrehose.Client` with ``from_seq``, the REQUEST path ``fyrehose
sub --from`` uses) fetches N+1 up to the gateway's position at that moment
from whichever journal holds them.  What no journal holds is reported as an
SSE comment (``: lost A..B (reason)``).  Held bytes are bounded by the
connection's ``max_pending``, like everything else queued for a client.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import gevent

from fyrehose.client import Client
from fyrehose.envelope import Envelope
from fyrehose.gateways.http import sse
from fyrehose.subjects import match
from fyrehose.tracker import Lost

if TYPE_CHECKING:
    from fyrehose.gateways.http.gateway import HttpGateway
    from fyrehose.gateways.tcp import Connection

log = logging.getLogger("fyrehose.gateway")

QUIET = 1.0  # seconds without a backfilled message after which a fetch with no known end has caught up
FIRST_ANSWER = 3.0  # seconds such a fetch waits for its first message (the first REQUEST's round trips)


class EventStream:
    """The events of one SSE response; ``write`` frames bytes into the response body."""

    def __init__(self, connection: Connection, gateway: HttpGateway, pattern: str,
                 write: Callable[[bytes], bytes]) -> None:
        self.connection = connection
        self.gateway = gateway
        self.pattern = pattern
        self.write = write
        self._held: list[tuple[int, Envelope]] | None = None
        self._held_bytes = 0
        self._backfill: gevent.Greenlet | None = None

    def start(self, last_event_id: int | None) -> None:
        position = self.gateway.bridge.position if self.gateway.bridge is not None else 0
        if last_event_id is not None and (last_event_id < position or position == 0):
            self._held = []
            self._backfill = gevent.spawn(self._run_backfill, last_event_id + 1, position or None)
        self.gateway.add_stream(self)

    def stop(self) -> None:
        self.gateway.remove_stream(self)
        if self._backfill is not None:
            self._backfill.kill(block=False)

    def deliver(self, seq: int, message: Envelope) -> None:
        if self.connection.closing is not None:  # the response may be finished already: nothing more to frame
            return
        if self._held is not None:
            self._held.append((seq, message))
            self._held_bytes += len(message.data) + len(message.subject)
            if self._held_bytes > self.connection.max_pending:
                self.connection.slow_consumer(f"more than {self.connection.max_pending} bytes held during backfill")
            return
        self.connection.send(self.write(sse.event(seq, message.subject, message.data)))
        self.gateway.stats["events sent"] += 1

    def _run_backfill(self, first: int, last: int | None) -> None:
        """Send ``first``..``last`` (None: up to what the live stream holds), then what was held."""
        settings = self.gateway.settings
        if last is not None and last - first + 1 > settings.backfill_limit:
            skipped = last - settings.backfill_limit
            self._send(sse.comment(f"lost {first}..{skipped} (backfill is limited to {settings.backfill_limit} messages)"))
            first = skipped + 1
        sent = first - 1
        try:
            sent = self._fetch(first, last, settings.backfill_timeout)
        except Exception as exc:  # a backfill that fails must not end the live stream
            log.warning("%s: backfill from %d failed: %s", self.connection.peer, first, exc)
            self._send(sse.comment(f"lost {first}..{last or ''} (backfill failed: {exc})"))
        finally:
            held, self._held = self._held or [], None
            for seq, message in held:
                if seq > sent:  # a message both fetched and routed live goes once
                    self.deliver(seq, message)

    def _bound(self, last: int | None) -> int | None:
        """The last sequence to fetch: ``last``, or just before the first message the live stream holds."""
        if last is not None:
            return last
        return self._held[0][0] - 1 if self._held else None

    def _fetch(self, first: int, last: int | None, timeout: float) -> int:
        """Send the matching messages from ``first`` on; the highest sequence reached.

        With ``last`` unknown (the gateway has routed nothing yet, as after a
        restart) the fetch ends just before the first live message, or once
        the backfill stream has been quiet for a second after its first
        message (or for three seconds without any): it has caught up.
        """
        settings = self.gateway.settings
        client = Client(settings.backbone, journal=False, auth=settings.credentials)
        deadline = time.monotonic() + timeout
        reached = first - 1
        try:
            stream = client.subscribe(">", from_seq=first, on_loss="yield", announce=False)
            while self.connection.closing is None:
                bound = self._bound(last)
                if bound is not None and reached >= bound:
                    return reached
                remaining = deadline - time.monotonic()
                event = stream.get(timeout=min(remaining, QUIET)) if remaining > 0 else None
                if event is None:
                    started_long_ago = time.monotonic() > deadline - timeout + FIRST_ANSWER
                    if remaining > 0 and self._bound(last) is None and (reached >= first or started_long_ago):
                        return reached  # quiet, and nothing live yet: caught up
                    if remaining > QUIET:
                        continue
                    self._send(sse.comment(f"lost {reached + 1}..{bound or ''} (backfill timed out after {timeout:g} s)"))
                    return reached if bound is None else bound
                bound = self._bound(last)
                if isinstance(event, Lost):
                    end = event.to_seq if bound is None else min(event.to_seq, bound)
                    self._send(sse.comment(f"lost {event.from_seq}..{end} ({event.reason})"))
                    reached = event.to_seq
                    continue
                reached = event.seq
                if (bound is None or event.seq <= bound) and match(self.pattern, event.envelope.subject):
                    self._send(sse.event(event.seq, event.envelope.subject, event.envelope.data))
                    self.gateway.stats["events backfilled"] += 1
            return reached
        finally:
            client.close()

    def _send(self, data: bytes) -> None:
        if self.connection.closing is None:
            self.connection.send(self.write(data))
