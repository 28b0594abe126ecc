"""A gateway's gevent driver of the pure backbone connection: one UDP socket read by the loop itself, no threads.

:class:`~fyrehose.protocol.connection.BackboneConnection` (keepalives, ordering, gap
REQUESTs, confirmed publishes) and :class:`~fyrehose.subjects.session.SubjectSession`
(session, signing, trust exchange, interest announcements) decide
everything; this module only moves their datagrams through a gevent socket
and runs their timers (one :class:`~fyrehose.subjects.client_core.ClientCore`),
in the gevent style of :class:`~fyrehose.drivers.receive_loop.ReceiveLoop`,
whose rounds the gateway's one loop runs in its own callbacks
(:meth:`~fyrehose.drivers.receive_loop.ReceiveLoop.follow`): a CONFIRM is read
and its waiters' replies queued in the turn the socket turned readable, with
no greenlet switched to and back.  The datagrams go out from the loop's
non-blocking socket: a send never waits in the loop (a full send buffer loses
the datagram, sent again on a timer).  Nothing is monkey-patched.

Publishes from every TCP client of the gateway share datagrams.  A
connection's :meth:`BackboneLink.submit_with` queues its messages with a
callback and returns at once; once everything that had input in this
iteration of the loop has queued its own, one loop callback starts a single
:class:`~fyrehose.protocol.publishing.PendingPublishes` batch for all of them,
so one CONFIRM datagram answers many clients.  Each submitter's callback
gets the sequence numbers of its own messages, in its own order, once all
of them are confirmed (or the error once the batch's deadline passed), all
of them while the link takes the datagram that completed the batch.
:meth:`BackboneLink.publish` is the same for a greenlet that waits.

A gateway that only publishes (the Lumberjack gateway) runs the link without
``on_events``: NOSUBSCRIBE, nothing tracked.  With a ``held`` store it is
also a journaling client: it keeps what the backbone confirmed and answers
the backbone's FORWARDs from it (:mod:`fyrehose.protocol.forwarding`) in a greenlet
of its own, paced by a token bucket, so a subscriber that missed a DELIVER
(or a backbone that died between CONFIRM and DELIVER) still gets every
confirmed message from the gateway.
"""
from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from itertools import chain

import gevent
from gevent.event import AsyncResult, Event
from gevent.queue import Full, Queue

from fyrehose.drivers.backbone_io import (
    RECEIVE_BUFFER,
    UNREACHABLE_AFTER,
    answer_forward,
    await_ack,
    forward_bucket,
    gevent_style,
    open_socket,
    say_goodbye,
    sent,
    wall_us,
)
from fyrehose.drivers.receive_loop import ReceiveLoop
from fyrehose.errors import BackboneUnreachable, FyrehoseError, PublishTimeout
from fyrehose.net.addresses import parse_hostport, resolve_ipv4
from fyrehose.net.group_socket import join_group
from fyrehose.protocol import codec
from fyrehose.protocol.codec import Address
from fyrehose.protocol.connection import BackboneConnection, ConnectionOptions, DeliverForm, Incoming
from fyrehose.protocol.forwarding import FORWARD_RATE, MessageStore
from fyrehose.protocol.frame_run import FrameRun
from fyrehose.protocol.publishing import Finished
from fyrehose.protocol.tracker import Event as StreamEvent
from fyrehose.protocol.tracker import Lost
from fyrehose.runtime.fatal import guarded
from fyrehose.subjects.client_core import ClientCore
from fyrehose.subjects.session import SubjectSession

log = logging.getLogger("fyrehose.gateway")

TIMER_PERIOD = 0.02  # the receive loop's longest wait: other greenlets' changes (a new interest) wait no longer
YIELD_EVERY = 16  # datagrams taken in a row before the loop serves the clients (and the Lumberjack writers)
FORWARDS_QUEUED = 1024  # FORWARDs waiting for their answer; more are dropped (the requester asks again)

EventsHandler = Callable[[list[StreamEvent]], None]
RunsHandler = Callable[[list[FrameRun]], None]
Done = Callable[[list[int] | None, Exception | None], None]  # the sequence numbers, or why not


@dataclass(slots=True)
class _Waiter:
    payloads: list[bytes]
    done: Done


class BackboneLink:
    """One gateway process's connection to the backbone: subscribed to the whole stream, or a publisher only.

    ``on_events`` gets the ordered stream; ``from_seq`` starts it there
    instead of at whatever arrives first: the first DELIVER (or the
    backbone's HEAD) opens a hole back to it, which the tracker REQUESTs, as
    ``fyrehose sub --from`` does.  Without ``on_events`` the link only
    publishes (NOSUBSCRIBE).  ``held`` keeps every confirmed message
    (its owner bounds it) and makes the link answer FORWARDs from it at
    ``forward_rate`` messages/s; without it the link is NOJOURNAL.
    With ``on_runs`` a datagram of the backbone's that continues the
    stream goes there whole, as a FrameRun (what is out of order still
    comes to ``on_events`` message by message), for a reader that chooses
    a datagram's messages in one step (:mod:`fyrehose.subjects.selection`).
    """

    def __init__(self, backbone: str, subjects: SubjectSession, on_events: EventsHandler | None, *,
                 stats: Counter, publish_timeout: float = 5.0, bind: Address | None = None,
                 unreachable_after: float = UNREACHABLE_AFTER, multicast: Address | None = None,
                 from_seq: int | None = None, held: MessageStore | None = None,
                 forward_rate: float = FORWARD_RATE, on_runs: RunsHandler | None = None) -> None:
        if on_events is None and (multicast is not None or from_seq is not None or on_runs is not None):
            raise ValueError("a link that only publishes takes no stream: no multicast group, no from_seq, no on_runs")
        host, port = parse_hostport(backbone, 2323)
        self.backbone: Address = (resolve_ipv4(host), port)  # sources compare as IP literals
        self.subjects = subjects
        self.on_events = on_events
        self.on_runs = on_runs
        self.stats = stats
        self.publish_timeout = publish_timeout
        self.unreachable_after = unreachable_after
        self.held = held
        self.forward_rate = forward_rate
        flags = codec.FLAG_BATCH
        flags |= codec.FLAG_NOSUBSCRIBE if on_events is None else codec.FLAG_HEAD
        if held is None:
            flags |= codec.FLAG_NOJOURNAL
        auth = subjects.auth
        options = ConnectionOptions(flags=flags, multicast=multicast is not None,
                                    delivers=DeliverForm.MESSAGES if on_runs is None else DeliverForm.ANY_RUNS)
        self.connection = BackboneConnection(self.backbone, options, stats=stats,
                                             vouch=auth.vouches if auth is not None else None)
        if on_events is not None:
            self.connection.track(from_seq)
        self.publishes = self.connection.publishes
        self.sock = open_socket(self.backbone, bind=bind, send_buffer=True, style=gevent_style())
        self._closed = False
        self._acked = Event()
        self._outbox: list[_Waiter] = []  # publishes queued in this turn of the loop
        self._flush_scheduled = False
        self._batches: dict[int, list[_Waiter]] = {}  # batch number -> its waiters, in payload order
        self._answer_due = False  # a batch went out since the backbone last answered every one (:meth:`_datagram`)
        self._confirmed_to = 0  # the highest sequence number the backbone confirmed to this link
        self.core = ClientCore(self.connection, subjects)
        self.group = multicast
        self._loop = ReceiveLoop(  # the socket and the group's, read in the loop's callbacks
            self.sock, next_deadline=self.core.next_deadline, handle_timers=self._handle_timers,
            datagram=self._datagram, stats=stats, backbone=self.backbone,
            group=join_group(multicast, self.backbone, RECEIVE_BUFFER) if multicast is not None else None,
            group_address=multicast, style=gevent_style(), limit=YIELD_EVERY, longest=TIMER_PERIOD)
        self._sendto = self._loop.sock.sendto  # non-blocking: the rounds and the publishes' flush run in the hub
        self._loop.follow(lambda: not self._closed, "gateway backbone receive")
        self._forwards: Queue[codec.Forward | None] = Queue(FORWARDS_QUEUED)  # None: the link closed
        if held is not None:
            gevent.spawn(guarded(self._forward_loop, "gateway forwarder"))
        await_ack(self._acked.wait, self.backbone, unreachable_after, give_up=self.close)
        self.send_unconfirmed(subjects.start(time.monotonic(), wall_us()))

    @property
    def reachable(self) -> bool:
        return self.connection.reachable(time.monotonic(), self.unreachable_after)

    def close(self) -> None:
        if self._closed:
            return
        if self.reachable:
            self.send_unconfirmed(self.subjects.leave())
        self._closed = True
        say_goodbye(self.sock, self.connection)
        try:  # wakes the forwarder if it waits for one; a busy one sees _closed before its next datagram
            self._forwards.put_nowait(None)
        except Full:
            pass
        self._loop.close()
        batches, self._batches = self._batches, {}
        for waiters in batches.values():
            for waiter in waiters:
                _call(waiter.done, None, FyrehoseError("gateway closed while publishing"))
        self.sock.close()

    # ------------------------------------------------------------ sending

    def send_unconfirmed(self, payloads: list[bytes]) -> None:
        """PUSH without CONFIRM: control messages whose loss a later one repairs."""
        for payload in payloads:
            self._send(codec.encode_push(payload))

    def _send(self, datagram: bytes) -> None:
        try:
            self._sendto(datagram, self.backbone)
        except OSError:  # a send buffer that stayed full: lost like a dropped datagram, sent again on a timer
            self.stats["send errors"] += 1

    def publish(self, payloads: list[bytes]) -> list[int]:
        """Publish and wait; the sequence numbers once the backbone confirmed every message.

        Raises BackboneUnreachable or PublishTimeout (the messages may or may
        not have been published) or FyrehoseError when the gateway closes.
        """
        return self.submit(payloads).get()

    def submit(self, payloads: list[bytes]) -> AsyncResult:
        """Publish without waiting: the result gets the sequence numbers, or the error :meth:`publish` raises.

        BackboneUnreachable and a closed gateway are raised at once.
        """
        result: AsyncResult = AsyncResult()

        def done(seqs: list[int] | None, error: Exception | None) -> None:
            if error is None:
                result.set(seqs)
            else:
                result.set_exception(error)

        self.submit_with(payloads, done)
        return result

    def submit_with(self, payloads: list[bytes], done: Done) -> None:
        """Publish without waiting: ``done(seqs, None)`` once confirmed, ``done(None, error)`` if not.

        ``done`` runs on the loop, without waiting itself.  BackboneUnreachable
        and a closed gateway are raised at once.
        """
        if self._closed:
            raise FyrehoseError("gateway closed")
        if not self.reachable:
            host, port = self.backbone
            raise BackboneUnreachable(f"no KEEPALIVE-ACK from {host}:{port} for {self.unreachable_after:g} s")
        if not payloads:
            done([], None)
            return
        self._outbox.append(_Waiter(payloads, done))
        if not self._flush_scheduled:
            self._flush_scheduled = True
            gevent.get_hub().loop.run_callback(self._flush)

    def _flush(self) -> None:
        """One batch for everything queued in this turn of the loop: one run of tags, shared CONFIRMs."""
        self._flush_scheduled = False
        waiters, self._outbox = self._outbox, []
        if self._closed:
            for waiter in waiters:
                _call(waiter.done, None, FyrehoseError("gateway closed while publishing"))
            return
        payloads = waiters[0].payloads if len(waiters) == 1 else [p for w in waiters for p in w.payloads]
        try:
            number, datagrams = self.publishes.start(payloads, time.monotonic(), self.publish_timeout)
        except Exception as exc:  # noqa: BLE001 - every waiter hears it; a callback has nobody else to tell
            for waiter in waiters:
                _call(waiter.done, None, exc)
            return
        self._batches[number] = waiters
        self._answer_due = True
        self.stats["publish batches"] += 1
        for datagram in datagrams:
            self._send(datagram)

    def _finish(self, finished: list[Finished]) -> None:
        for batch in finished:
            waiters = self._batches.pop(batch.batch, None)
            if waiters is None:
                continue
            if batch.seqs is not None:
                last = batch.seqs[-1] if batch.seqs.__class__ is range else max(batch.seqs)
                if last > self._confirmed_to:
                    self._confirmed_to = last
                if self.held is not None:  # kept before any waiter hears of it: a FORWARD may follow at once
                    payloads = waiters[0].payloads if len(waiters) == 1 else chain.from_iterable(
                        waiter.payloads for waiter in waiters)
                    self.held.add_many(zip(batch.seqs, payloads))
                start = 0
                for waiter in waiters:
                    end = start + len(waiter.payloads)
                    _call(waiter.done, list(batch.seqs[start:end]), None)  # a list, however the batch holds them
                    start = end
                continue
            total = sum(len(w.payloads) for w in waiters)
            for waiter in waiters:
                _call(waiter.done, None, PublishTimeout(
                    f"{len(waiter.payloads)} messages unconfirmed after {self.publish_timeout:g} s "
                    f"({batch.unconfirmed} of the gateway's batch of {total}); "
                    "they may or may not have been published"))

    # ------------------------------------------------------------ receiving

    def _datagram(self, data: bytes, source: Address, now: float, from_group: bool) -> None:
        """One datagram through the connection; the datagram that brings the last answer due ends the round.

        A waiting client's request costs the link one CONFIRM and (subscribed) the DELIVER of its own message;
        read on, the round would end on a read that finds the socket empty, a system call per request for
        nothing.  Once every batch sent is confirmed and the stream has reached the last of them, the round
        ends instead: the loop watches the socket level-triggered, so whatever came meanwhile (another
        publisher's DELIVER) is read in the next iteration.
        """
        connection = self.connection
        self._apply(connection.receive_group(data, source, now) if from_group else connection.receive(data, source, now))
        if self._answer_due and not self._batches:
            tracker = connection.tracker
            if tracker is None or (tracker.next is not None and tracker.next > self._confirmed_to):
                self._answer_due = False
                self._loop.end_round()

    def _apply(self, incoming: Incoming) -> None:
        if incoming.published:
            self._finish(incoming.published)
        if incoming.acked:
            self._acked.set()
        if incoming.runs:
            self.on_runs(incoming.runs)  # type: ignore[misc]  # only a link with on_runs is given runs
        if incoming.events:
            self.on_events(incoming.events)  # type: ignore[misc]  # only a subscribed link tracks the stream
        if incoming.forwards:
            self._queue_forwards(incoming.forwards)
        if incoming.fell_back:
            self._loop.leave_group()

    def end_round(self) -> None:
        """The stream's handler did a long piece of work in the loop's callback, where it cannot pause: the clients
        get the loop before the next datagram is read (:meth:`~fyrehose.drivers.receive_loop.ReceiveLoop.end_round`)."""
        self._loop.end_round()

    def _handle_timers(self, now: float) -> None:
        due = self.core.handle_timers(now, wall_us())
        for datagram in due.datagrams:
            self._send(datagram)
        if due.finished:
            self._finish(due.finished)
        if due.events:
            self.on_events(due.events)  # type: ignore[misc]  # only a subscribed link tracks the stream

    # ------------------------------------------------------------ serving FORWARDs

    def _queue_forwards(self, forwards: list[codec.Forward]) -> None:
        for forward in forwards:
            try:
                self._forwards.put_nowait(forward)
            except Full:
                self.stats["forwards dropped"] += 1
                self.connection.forward_done(forward)

    def _forward_loop(self) -> None:
        """Answer each FORWARD in turn from the held store, every re-DELIVER waiting for a token of the bucket."""
        held = self.held
        assert held is not None  # the loop runs only for a link that holds
        bucket = forward_bucket(self.forward_rate)
        while not self._closed:
            forward = self._forwards.get()
            if forward is None:
                return
            self.connection.forward_done(forward)
            self.stats["forwards"] += 1
            answer_forward(forward, held, bucket, self._send_to, self.stats, style=gevent_style(),
                           stopped=lambda: self._closed)

    def _send_to(self, datagram: bytes, target: Address) -> bool:
        return sent(self.sock, datagram, target)


def _call(done: Done, seqs: list[int] | None, error: Exception | None) -> None:
    """Tell one submitter; its failure is its own (logged), never the link's nor the other submitters'."""
    try:
        done(seqs, error)
    except Exception:
        log.exception("a publish's callback failed")


def _first_of(event: StreamEvent) -> int:
    return event.from_seq if event.__class__ is Lost else event.seq  # type: ignore[union-attr]


def _last_of(event: StreamEvent) -> int:
    return event.to_seq if event.__class__ is Lost else event.seq  # type: ignore[union-attr]


class RangeLink:
    """A link of its own for the stream from ``first`` until a sequence told later (:meth:`stop_at`).

    What a backfill needs: the messages ``first``..``end`` of the backbone,
    from its recent log or whichever journal holds them (the REQUEST path of
    ``fyrehose sub --from``), in order, each as a message or inside a loss,
    when ``end`` may only be known once the fetch is under way.  Events go to
    ``on_events`` as they come, none after the one that reaches ``end``;
    :attr:`done` is set once ``on_events`` has had that one.
    """

    def __init__(self, backbone: str, subjects: SubjectSession, on_events: EventsHandler, *, first: int,
                 stats: Counter) -> None:
        self.on_events = on_events
        self.reached = first - 1  # the last sequence handed to on_events
        self.end: int | None = None
        self.done = Event()
        self._closed = False
        self.link = BackboneLink(backbone, subjects, self._take, stats=stats, from_seq=first)

    def stop_at(self, end: int) -> None:
        """Hand out nothing after ``end``; :attr:`done` once ``end`` has been handed out (at once if it has)."""
        self.end = end
        if self.reached >= end:
            self.done.set()

    def close(self) -> None:
        self._closed = True  # nothing more for on_events, even from a datagram being taken now
        self.link.close()

    def _take(self, events: list[StreamEvent]) -> None:
        if self._closed or self.done.is_set():
            return
        end = self.end
        if end is not None and _last_of(events[-1]) > end:
            events = [event for event in events if _first_of(event) <= end]
            if not events:
                return
        self.on_events(events)
        self.reached = _last_of(events[-1])
        if self.end is not None and self.reached >= self.end:  # the end may have been told meanwhile
            self.done.set()
