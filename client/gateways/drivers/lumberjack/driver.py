"""The driver of one writer's connection: two greenlets around the pure :class:`AckWindow`.

The reader greenlet feeds received bytes to the window and queues the events
as envelope messages, in chunks; the publisher greenlet publishes each chunk
through the gateway's :class:`~fyrehose.drivers.link.BackboneLink` (which
returns once the backbone CONFIRMed every message) and writes the acks the
window gives for it.  Both run in the gevent hub's thread, so a TLS socket is
never read and written by two OS threads at once (OpenSSL does not allow
that).  The writer's window is advisory; what bounds a connection is ``max_pending_bytes``
of messages read and not yet published: beyond it the reader stops reading
until the publisher catches up, so a writer that outruns the backbone is
slowed down by TCP itself and never disconnected.

How a connection ends decides what happens to events already read:

* the writer sends nothing for the inactivity timeout while none of its
  events wait to be published (a silent socket holding a slot of
  ``--max-connections``): nothing is pending, the connection is closed;
* the writer closes its side, or sends bad input: the events read before
  that are still published and acked (the writer may be waiting for them);
  the bad input itself is reported on stderr and nothing after it is read;
* an event its user may not publish to (``--users``): handled as bad input,
  the events before it are published and acked, it and what follows are not;
* the writer disappears (reset, failed ack write) or the gateway stops:
  queued events are dropped unpublished, so the writer's resend publishes
  them once; a chunk already being published finishes and, if the socket
  still works, is acked.
"""
from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable

import gevent
import gevent.event
import gevent.queue

from fyrehose.drivers.link import BackboneLink
from fyrehose.errors import BackboneUnreachable, FyrehoseError, PublishTimeout
from fyrehose.gateways.access.login import Login
from fyrehose.gateways.budget import InputBudget
from fyrehose.gateways.liveness import IdleTimeout
from fyrehose.gateways.lumberjack.events import PublishRefused, SubjectRule, to_message
from fyrehose.gateways.lumberjack.protocol import DataFrame, LumberjackError
from fyrehose.gateways.lumberjack.window import AckWindow

RECEIVE_SIZE = 1 << 16
CHUNK_EVENTS = 512  # events per publish: also the most a backbone outage can duplicate per connection
DEFAULT_MAX_PENDING_BYTES = 16 << 20  # read but unpublished message bytes per connection before reading pauses
KEEPALIVE_INTERVAL = 5.0  # 'A 0' while events wait, well inside Beats' 30 s timeout
RETRY_DELAY = 0.5
DEFAULT_STALL_TIMEOUT = 30.0  # seconds a frame may stay incomplete without a byte arriving
DEFAULT_INACTIVITY_TIMEOUT = 60.0  # seconds a writer may send nothing: Logstash's client_inactivity_timeout
_END = None


class Inactive(Exception):
    """The writer sent nothing for the inactivity timeout while none of its events were being published."""


class LumberjackClient:
    def __init__(self, sock, peer: str, publisher: BackboneLink, rule: SubjectRule, window: AckWindow,
                 stats: Counter, log: Callable[[str], None], max_pending_bytes: int = DEFAULT_MAX_PENDING_BYTES,
                 budget: InputBudget | None = None, stall_timeout: float = DEFAULT_STALL_TIMEOUT,
                 inactivity_timeout: float = DEFAULT_INACTIVITY_TIMEOUT,
                 log_inactive: Callable[[str], None] | None = None, login: Login | None = None) -> None:
        self.sock = sock
        self.login = login
        self.may_publish = login.may_publish if login is not None else None  # None without --users
        self.budget = budget if budget is not None else InputBudget(1 << 62)
        self.stall_timeout = stall_timeout
        self.idle = IdleTimeout(inactivity_timeout)
        self.log_inactive = log_inactive or log  # the server's, logging once a second (a flood of silent sockets)
        self._last_activity = time.monotonic()  # the writer's last byte, or the end of the last publishing
        self._claimed = 0  # bytes of self.budget this connection's incomplete frame holds
        self.peer = peer
        self.publisher = publisher
        self.rule = rule
        self.window = window
        self.stats = stats
        self.log = log
        self.max_pending_bytes = max_pending_bytes
        self._pending_bytes = 0  # bytes of the messages queued in _chunks or being published
        self._room = gevent.event.Event()  # set when the publisher frees bytes
        self._chunks: gevent.queue.Queue = gevent.queue.Queue()
        self._aborted = gevent.event.Event()
        self._reader: gevent.Greenlet | None = None
        self._last_keepalive = time.monotonic()

    def run(self) -> None:
        """Serve the connection until it ends; the caller closes the socket."""
        self._reader = gevent.spawn(self._read_loop)
        publisher = gevent.spawn(self._publish_loop)
        gevent.joinall([self._reader, publisher])

    def abort(self) -> None:
        """Stop reading and publishing now (a chunk being published still finishes and is acked)."""
        self._aborted.set()
        self._room.set()
        if self._reader is not None and self._reader is not gevent.getcurrent():
            self._reader.kill(block=False)

    # ------------------------------------------------------------ reading

    def _read_loop(self) -> None:
        try:
            while not self._aborted.is_set():
                if self._pending_bytes >= self.max_pending_bytes:
                    self.stats["reads paused"] += 1
                    while self._pending_bytes >= self.max_pending_bytes and not self._aborted.is_set():
                        self._room.clear()
                        self._room.wait()
                    continue
                data = self._receive()
                if not data:
                    if self.window.decoder.buffered:
                        raise LumberjackError(
                            f"connection closed inside a frame ({self.window.decoder.buffered} bytes of it received)")
                    return
                self._last_activity = time.monotonic()
                self.stats["bytes received"] += len(data)
                self._queue(self.window.feed(data))
                committed = self.window.decoder.committed
                if not self.budget.resize(self._claimed, committed):
                    self.stats["frames refused: input budget spent"] += 1
                    raise LumberjackError(f"a frame of {committed} bytes does not fit the gateway's input budget "
                                          f"({self.budget.used} of {self.budget.limit} bytes committed)")
                self._claimed = committed
        except Inactive as exc:
            self.stats["inactive connections closed"] += 1
            self.log_inactive(f"{self.peer}: {exc}, connection closed; "
                              f"{self.stats['inactive connections closed']} closed so far")
        except PublishRefused as exc:
            self.stats["publishes refused"] += 1
            if self.login is None or self.login.access.log.allow(self.login.address, time.monotonic()):
                self.log(f"{self.peer}: event refused, connection closed: {exc}")
        except LumberjackError as exc:
            self.stats["protocol errors"] += 1
            self.log(f"{self.peer}: bad input, connection closed: {exc}")
        except OSError as exc:  # reset, TLS failure: nobody is left to ack
            self.stats["connections broken"] += 1
            self.log(f"{self.peer}: connection broken: {exc}")
            self._aborted.set()
        finally:
            self.budget.resize(self._claimed, 0)
            self._claimed = 0
            self._chunks.put(_END)

    def _receive(self) -> bytes:
        """The next bytes; a frame that stops arriving for ``stall_timeout`` ends the connection (slowloris),
        and so does a writer that sends nothing between frames for the inactivity timeout, unless some of
        its events are still being published: it is waiting for their acks, not idle."""
        if self.window.decoder.buffered:
            with gevent.Timeout(self.stall_timeout, False):
                return self.sock.recv(RECEIVE_SIZE)
            self.stats["stalled frames"] += 1
            raise LumberjackError(f"no byte of an incomplete frame for {self.stall_timeout:g} s")
        while True:
            deadline = self.idle.next_deadline(self._last_activity, self._publishing())
            if deadline is None:  # publishing (look again a timeout later), or no timeout at all
                timeout = self.idle.seconds or None
            else:
                timeout = max(0.0, deadline - time.monotonic())
            with gevent.Timeout(timeout, False):
                return self.sock.recv(RECEIVE_SIZE)
            if self.idle.handle_timers(time.monotonic(), self._last_activity, self._publishing()):
                raise Inactive(f"nothing received for {self.idle.seconds:g} s (--client-inactivity-timeout)")

    def _publishing(self) -> bool:
        """Events of this connection are queued or being published: their acks are still to come."""
        return self._pending_bytes > 0

    def _queue(self, events: list[DataFrame]) -> None:
        """Queue the events as messages; those before a bad one are queued before its error is raised."""
        chunk: list[bytes] = []
        try:
            for event in events:
                message = to_message(event, self.rule, self.may_publish)
                self._pending_bytes += len(message)
                chunk.append(message)
                if len(chunk) == CHUNK_EVENTS:
                    self._chunks.put(chunk)
                    chunk = []
        finally:
            if chunk:
                self._chunks.put(chunk)

    # ------------------------------------------------------------ publishing

    def _publish_loop(self) -> None:
        while True:
            try:
                chunk = self._chunks.get(timeout=KEEPALIVE_INTERVAL)
            except gevent.queue.Empty:
                self._keepalive()
                continue
            if chunk is _END:
                return
            if self._aborted.is_set():
                self.stats["events dropped unpublished"] += len(chunk)
            elif self._publish(chunk):
                self._send(self.window.published(len(chunk)))
            else:
                self.stats["events dropped unpublished"] += len(chunk)
            self._pending_bytes -= sum(map(len, chunk))
            self._last_activity = time.monotonic()  # the writer waited for these acks: its silence counts from now
            self._room.set()

    def _publish(self, chunk: list[bytes]) -> bool:
        """Publish until the backbone confirms every message; False if the connection ends first."""
        failing = False
        while True:
            try:
                self.publisher.publish(chunk)
            except (PublishTimeout, BackboneUnreachable) as exc:
                self.stats["publish retries"] += 1
                if not failing:
                    self.log(f"{self.peer}: {len(chunk)} events wait for the backbone, retrying: {exc}")
                    failing = True
                self._keepalive()
                if self._aborted.wait(RETRY_DELAY):
                    return False
                continue
            except FyrehoseError as exc:  # the link closed: the gateway is stopping
                self.log(f"{self.peer}: {len(chunk)} events not published: {exc}")
                self.abort()
                return False
            self.stats["events published"] += len(chunk)
            if failing:
                self.log(f"{self.peer}: the backbone confirmed the waiting events")
            return True

    def _keepalive(self) -> None:
        now = time.monotonic()
        if now - self._last_keepalive >= KEEPALIVE_INTERVAL:
            self._last_keepalive = now
            self._send(self.window.keepalive())

    def _send(self, data: bytes) -> None:
        if not data:
            return
        try:
            self.sock.sendall(data)
        except OSError as exc:
            if not self._aborted.is_set():
                self.stats["connections broken"] += 1
                self.log(f"{self.peer}: cannot send acks, connection dropped: {exc}")
            self.abort()
