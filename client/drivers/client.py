"""The blocking fyrehose client for scripts: publish, subscribe in order, and serve FORWARDs.

It is a thin I/O driver around the pure :class:`~fyrehose.subjects.client_core.ClientCore`
(the connection, its publishes and the subject session) and
:class:`~fyrehose.drivers.routing.SubjectRouter` (which subscription, request or
initial-value gate each event goes to): one receive thread, the threaded
:class:`~fyrehose.drivers.receive_loop.ReceiveLoop` (which also runs the timers:
KEEPALIVE, gap REQUESTs, give-ups, heartbeats, initial-value retries), and one
forwarder thread that paces re-DELIVERs.  Under gevent's monkey patching those
threads are greenlets and every wait is cooperative.  :class:`Subscription`
lives in :mod:`fyrehose.drivers.subscription` and the exceptions in
:mod:`fyrehose.errors`; both are importable from here too.

Delivery guarantee of :meth:`Client.publish`: when it returns ``seq`` the
backbone has sequenced the message exactly once under that number and handed
it to its fan-out to every live subscriber (the single-process backbone has
sent those DELIVERs already; the multi-process one sends them from its log
right after, docs/operations.md).  A PUSH or CONFIRM lost on the way is
retried with the same tag, and the backbone answers a retry of an already
sequenced tag with the original number instead of sequencing it again (it
remembers tags for 30 s, longer than any ``timeout`` allowed here, and the
multi-process backbone keeps that memory across a restart of its sequencer).
If the whole backbone restarts between the first PUSH and a retry, that memory
is gone and the message may be published twice.  When ``publish`` raises
:class:`PublishTimeout` the message may or may not have been published.

Subjects (docs/protocol.md, "Envelope"; docs/subjects.md): ``publish(data,
subject=...)`` wraps the data in an envelope, ``subscribe(pattern)`` filters
the one ordered stream by subject pattern, ``subscribe(subject,
initial=True)`` first gets the subject's value from the cache, and
``request``/``snapshot`` are request/reply over ``_INBOX`` subjects.  With
``user=`` the client runs a session (HELLO, heartbeats, BYE); with ``auth=``
it also signs every envelope it sends and drops, and counts in
``client.auth.stats``, every enveloped message that fails verification
(docs/security.md).
"""
from __future__ import annotations

import queue
import threading
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import replace

from fyrehose.drivers.backbone_io import (
    RECEIVE_BUFFER,
    THREADS,
    UNREACHABLE_AFTER,
    answer_forward,
    await_ack,
    forward_bucket,
    open_socket,
    say_goodbye,
    sent,
    wall_us,
)
from fyrehose.drivers.receive_loop import ReceiveLoop
from fyrehose.drivers.routing import SubjectRouter
from fyrehose.drivers.subscription import Subscription
from fyrehose.errors import BackboneUnreachable, FyrehoseError, PublishTimeout, RequestTimeout
from fyrehose.errors import MessagesLost as MessagesLost  # re-exported: part of this module's API
from fyrehose.net.addresses import parse_group, parse_hostport, resolve_ipv4
from fyrehose.net.group_socket import join_group
from fyrehose.protocol import codec
from fyrehose.protocol.codec import Address
from fyrehose.protocol.connection import KEEPALIVE_INTERVAL, BackboneConnection, ConnectionOptions, DeliverForm
from fyrehose.protocol.forwarding import FORWARD_RATE, MessageStore
from fyrehose.protocol.frame_run import FrameRun
from fyrehose.protocol.publishing import CONFIRM_RETRY, MAX_PUBLISH_TIMEOUT, Finished
from fyrehose.protocol.recent_messages import RecentMessages
from fyrehose.protocol.tracker import DEFAULT_TRACKER_OPTIONS, Event, Lost, Message, SequenceTracker, TrackerOptions
from fyrehose.runtime.fatal import guarded
from fyrehose.subjects import envelope
from fyrehose.subjects.auth import Authenticator, Credentials
from fyrehose.subjects.client_core import ClientCore
from fyrehose.subjects.envelope import Envelope, MsgType, Status
from fyrehose.subjects.patterns import check_pattern, is_literal
from fyrehose.subjects.session import SubjectSession
from fyrehose.subjects.session_table import DEFAULT_INTERVAL, SNAP_PREFIX, SUB_STOP_PREFIX, LocalSession
from fyrehose.subjects.snapshots import WITH_SEQUENCE
from fyrehose.subjects.subscription_events import InitialGate, SubjectMessage

_CONFIRM = bytes([codec.CONFIRM])


SEND_WAIT = 1.0  # seconds a send waits for room in the socket's send buffer before it counts as failed
DRAIN_LIMIT = 64  # datagrams taken from the socket in one go before the timers run again


class Client:
    """A backbone client; use as a context manager or call :meth:`close`.

    ``subscribe=False`` sets NOSUBSCRIBE (a pure publisher); ``journal=False``
    sets NOJOURNAL.  A client that does not subscribe holds nothing to serve, so
    it is NOJOURNAL too, unless it has a ``store`` that its owner fills (a
    publisher keeping what it published).  :attr:`held` keeps what it answers
    FORWARDs from: a :class:`RecentMessages` of at most ``journal_bytes``, or
    ``store``, another :class:`MessageStore` (the disk journal's), which replaces
    it; ``forward_rate`` paces those answers (messages/s).

    ``user`` starts a session ``user.NONCE`` (HELLO now, a heartbeat every
    ``session_interval`` seconds, BYE on close), which the cache uses to
    expire this client's subscriptions.  ``auth`` (:class:`~fyrehose.subjects.auth.Credentials`)
    implies a session for ``auth.user``, signs what the client publishes and
    verifies what it receives; it needs ``subscribe=True`` because the trust
    exchange is answered in both directions.

    ``multicast`` (``"GROUP:PORT"``, the backbone's ``--multicast``) joins the
    backbone's group on the interface that routes to it and takes DELIVERs
    from the group instead of unicast; if the group brings nothing while the
    backbone sequences on, the client falls back to unicast by itself, says
    so once on stderr and counts it (``stats["multicast fallbacks"]``).
    """

    def __init__(
        self,
        backbone: Address | str = ("127.0.0.1", 2323),
        *,
        subscribe: bool = True,
        journal: bool = True,
        batch: bool = True,
        journal_bytes: int = 64 << 20,
        keepalive_interval: float = KEEPALIVE_INTERVAL,
        unreachable_after: float = UNREACHABLE_AFTER,
        confirm_retry: float = CONFIRM_RETRY,
        request_delay: float = DEFAULT_TRACKER_OPTIONS.request_delay,
        give_up_after: float = DEFAULT_TRACKER_OPTIONS.give_up_after,
        forward_rate: float = FORWARD_RATE,
        bind: Address | None = None,
        store: MessageStore | None = None,
        user: str | None = None,
        auth: Credentials | None = None,
        session_interval: float = DEFAULT_INTERVAL,
        multicast: str | Address | None = None,
    ) -> None:
        if isinstance(backbone, str):
            backbone = parse_hostport(backbone, 2323)
        backbone = (resolve_ipv4(backbone[0]), backbone[1])  # sources compare as IP literals
        if auth is not None and not subscribe:
            raise ValueError("auth needs subscribe=True: the trust exchange is answered both ways")
        self.stats: Counter[str] = Counter()
        self.subjects = SubjectSession(user=user, credentials=auth, interval=session_interval, stats=self.stats)
        self.session: LocalSession | None = self.subjects.session
        self.auth: Authenticator | None = self.subjects.auth
        self.interest = self.subjects.interest  # announced on _INTEREST.ANNOUNCE
        group = parse_group(multicast) if isinstance(multicast, str) else multicast
        self.backbone: Address = backbone
        self.subscribing = subscribe
        self.journaling = journal and (subscribe or store is not None) and journal_bytes > 0
        self.flags = codec.FLAG_HEAD | codec.FLAG_REDELIVERING
        if not subscribe:
            self.flags |= codec.FLAG_NOSUBSCRIBE
        if not self.journaling:
            self.flags |= codec.FLAG_NOJOURNAL
        if batch:
            self.flags |= codec.FLAG_BATCH
        self.keepalive_interval = keepalive_interval
        self.unreachable_after = unreachable_after
        if store is not None and self.journaling:
            self.held: MessageStore | None = store
        else:
            self.held = RecentMessages(journal_bytes) if self.journaling else None
        options = ConnectionOptions(
            flags=self.flags, keepalive_interval=keepalive_interval, confirm_retry=confirm_retry,
            tracker=TrackerOptions(request_delay=request_delay, give_up_after=give_up_after, forward_rate=forward_rate),
            delivers=DeliverForm.ANY_RUNS, multicast=group is not None and subscribe)
        self.connection = BackboneConnection(backbone, options, stats=self.stats,
                                             vouch=self.auth.vouches if self.auth is not None else None)
        self._forward_rate = forward_rate

        self.sock = open_socket(backbone, bind=bind, receive_buffer=RECEIVE_BUFFER)
        self.sock.settimeout(SEND_WAIT)  # the descriptor is non-blocking from here on; sends wait for room
        self.address: Address = self.sock.getsockname()
        self.group: Address | None = group if self.connection.group_watch is not None else None
        self.core = ClientCore(self.connection, self.subjects)
        # the socket (and the group's), read without waiting: by the receive thread, and by the subscriptions'
        # readers between datagrams (see _pump); only under the loop's guard, so datagrams stay in order
        self._loop = ReceiveLoop(
            self.sock, next_deadline=self._next_deadline, handle_timers=self._handle_timers, datagram=self._handle,
            stats=self.stats, backbone=backbone,
            group=join_group(group, backbone, RECEIVE_BUFFER) if self.group is not None else None,  # type: ignore[arg-type]  # set with group
            group_address=self.group, limit=DRAIN_LIMIT, longest=0.1, guard=threading.Lock())

        self._closed = False
        self._lock = threading.Lock()
        self._confirmed = threading.Condition(self._lock)
        self._published: dict[int, Finished] = {}  # publish batches finished, until their caller takes them
        self._acked = threading.Event()
        self._forwards: queue.Queue = queue.Queue(maxsize=1024)
        self._pack: list[bytes] = []
        self._pack_size = 0
        self._pack_lock = threading.Lock()
        # subject routing, shared by the receive thread and subscribe/request callers
        self._router = SubjectRouter(self.subjects.new_inbox, self._send_start)
        self._announced: dict[Subscription, str] = {}  # subscription -> the pattern it added to self.interest
        if self.auth is not None:  # the trust exchange needs the stream before any subscription
            self.connection.track()

        self._reader = threading.Thread(target=guarded(self._run, "fyrehose-client receive"),
                                        name="fyrehose-client", daemon=True)
        self._forwarder = threading.Thread(target=guarded(self._forward_loop, "fyrehose-client forwarder"),
                                           name="fyrehose-forwarder", daemon=True)
        self._reader.start()
        self._forwarder.start()
        await_ack(self._acked.wait, backbone, unreachable_after, give_up=self.close)
        for payload in self.subjects.start(time.monotonic(), wall_us()):
            self._send_unconfirmed(payload)

    # ------------------------------------------------------------ lifecycle

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._closed:
            return
        self.flush()
        if self.reachable:
            for payload in self.subjects.leave():
                self._send_unconfirmed(payload)
        self._closed = True
        say_goodbye(self.sock, self.connection)
        try:
            self._forwards.put_nowait(None)
        except queue.Full:
            pass
        for thread in (self._reader, self._forwarder):
            if thread is not threading.current_thread():
                thread.join(2.0)
        with self._lock:
            self._confirmed.notify_all()
        self._router.close_all()
        self.sock.close()
        self._loop.close()

    @property
    def reachable(self) -> bool:
        return self.connection.reachable(time.monotonic(), self.unreachable_after)

    def _check_reachable(self) -> None:
        if self._closed:
            raise FyrehoseError("client is closed")
        if not self.reachable:
            host, port = self.backbone
            raise BackboneUnreachable(f"no KEEPALIVE-ACK from {host}:{port} for {self.unreachable_after:g} s")

    # ------------------------------------------------------------ publishing

    def publish(self, data: bytes, timeout: float = 5.0, *, subject: str | None = None,
                type: MsgType = MsgType.UPDATE, status: Status = Status.OK, reply: str | None = None) -> int:
        """Publish ``data`` and return its sequence number once the backbone confirmed it.

        Without ``subject`` the payload goes out raw, exactly as given.  With
        one it is wrapped in an envelope with ``type``, ``status`` and
        ``reply``, stamped with this client's session and signed when it has
        ``auth``.
        """
        return self.publish_many([data], timeout=timeout, subject=subject, type=type, status=status,
                                 reply=reply)[0]

    def publish_many(self, items: Iterable[bytes | Envelope], *, timeout: float = 10.0, window: int = 2048,
                     subject: str | None = None, type: MsgType = MsgType.UPDATE, status: Status = Status.OK,
                     reply: str | None = None) -> list[int]:
        """Publish several messages packed into few datagrams; their sequence numbers, in order.

        At most ``window`` messages are unconfirmed at a time.  The guarantee is
        that of :meth:`publish`; ``timeout`` bounds each window, not the whole call.
        ``subject`` (with ``type``, ``status``, ``reply``) envelopes every item;
        an item that is an :class:`~fyrehose.subjects.envelope.Envelope` is sent as itself.
        """
        if not 0 < timeout <= MAX_PUBLISH_TIMEOUT:
            raise ValueError(f"timeout must be in (0, {MAX_PUBLISH_TIMEOUT:g}] seconds")
        if subject is None and type == MsgType.UPDATE and status == Status.OK and reply is None:
            payloads = [item if item.__class__ is bytes else self._payload(item, None, type, status, None)
                        for item in items]
        else:
            payloads = [self._payload(item, subject, type, status, reply) for item in items]
        if payloads and max(map(len, payloads)) > codec.MAX_PAYLOAD:
            raise codec.PayloadTooLarge(max(map(len, payloads)))
        seqs: list[int] = []
        for start in range(0, len(payloads), window):
            seqs.extend(self._publish_window(payloads[start:start + window], timeout))
        return seqs

    def _publish_window(self, payloads: list[bytes], timeout: float) -> list[int]:
        """One batch through the connection's :class:`~fyrehose.protocol.publishing.PendingPublishes`.

        The receive thread matches the CONFIRMs and runs the connection's timers
        (sending unconfirmed messages again, giving up at ``timeout``); a
        publish called from the receive thread itself (a subscription's
        callback), or still waiting past its deadline, runs them here, so it
        always ends on time.  Waiters only look at their own batch: many
        concurrent publishes (a gateway's connections) cost no more each.
        """
        self._check_reachable()
        publishes = self.connection.publishes
        with self._lock:
            number, datagrams = publishes.start(payloads, time.monotonic(), timeout)
        self._send_to_backbone(datagrams)
        deadline = time.monotonic() + timeout
        on_reader = threading.current_thread() is self._reader
        with self._lock:
            while number not in self._published and not self._closed:
                now = time.monotonic()
                if on_reader or now >= deadline:  # nobody else runs the timers now: run them here
                    resends, expired = publishes.handle_timers(now)
                    self._finish_publishes(expired)
                    self._send_to_backbone(resends)
                    if number in self._published:
                        break
                self._confirmed.wait(min(max(deadline - now, 0.001), 0.1))
            finished = self._published.pop(number, None)
            if finished is None:
                publishes.cancel(number)
                raise FyrehoseError("client closed while publishing")
        if finished.seqs is None:
            self._check_reachable()
            raise PublishTimeout(
                f"{finished.unconfirmed} of {len(payloads)} messages unconfirmed after {timeout:g} s; "
                "they may or may not have been published"
            )
        return list(finished.seqs)

    def _send_to_backbone(self, datagrams: list[bytes]) -> None:
        for datagram in datagrams:
            try:
                self.sock.sendto(datagram, self.backbone)
            except OSError:  # a send buffer that stayed full: lost like a dropped datagram, sent again on a timer
                self.stats["send errors"] += 1

    def publish_nowait(self, data: bytes | Envelope, *, subject: str | None = None,
                       type: MsgType = MsgType.UPDATE, status: Status = Status.OK, reply: str | None = None) -> None:
        """Queue ``data`` for an unconfirmed, packed PUSH; sent when a datagram fills or on :meth:`flush`.

        No retry and no sequence number: the fastest and weakest way to publish
        (docs/protocol.md, client rule 5: the PUSH may be lost).  ``subject`` and the
        rest envelope it as in :meth:`publish`.
        """
        frame = codec.encode_push(self._payload(data, subject, type, status, reply))
        with self._pack_lock:
            if self._pack_size + len(frame) > codec.MAX_DATAGRAM:
                self._send_pack()
            self._pack.append(frame)
            self._pack_size += len(frame)

    def flush(self) -> None:
        """Send what :meth:`publish_nowait` queued."""
        with self._pack_lock:
            self._send_pack()

    def _send_pack(self) -> None:
        if self._pack and not self._closed:
            try:
                self.sock.sendto(b"".join(self._pack), self.backbone)
            except OSError:  # unconfirmed PUSHes may be lost; a full send buffer loses them here
                self.stats["send errors"] += 1
        self._pack = []
        self._pack_size = 0

    def _payload(self, item: bytes | Envelope, subject: str | None, type: MsgType, status: Status,
                 reply: str | None) -> bytes:
        if isinstance(item, Envelope):
            return self.subjects.seal(item)
        if subject is None:
            if type != MsgType.UPDATE or status != Status.OK or reply is not None:
                raise ValueError("type, status and reply need a subject")
            return bytes(item)
        return self.subjects.seal(Envelope(subject, bytes(item), MsgType(type), Status(status), reply))

    def _send_unconfirmed(self, payload: bytes) -> None:
        """One PUSH now, without CONFIRM: control messages whose loss a later retry or heartbeat covers."""
        try:
            self.sock.sendto(codec.encode_push(payload), self.backbone)
        except OSError:
            self.stats["send errors"] += 1

    # ------------------------------------------------------------ subscribing

    def subscribe(self, pattern: str | None = None, *, from_seq: int | None = None, on_loss: str = "raise",
                  max_queued: int = 1_000_000, max_queued_bytes: int = 256 << 20, initial: bool = False, initial_timeout: float = 5.0,
                  initial_retry: float = 0.5, announce: bool = True) -> Subscription:
        """An ordered, gap-free stream of the messages delivered from now on (or from ``from_seq``).

        ``pattern`` (``*`` one token, ``>`` the rest) keeps only enveloped
        messages with a matching subject; None keeps everything, raw payloads
        included.
        ``from_seq`` backfills older messages through REQUESTs; it must be given
        before this client starts tracking (on its first subscription).

        ``initial=True`` (a subject without wildcards) asks the cache with
        ``_SUB.START.<subject>`` and yields its answer first (type ``initial``,
        status ``ok``/``stale``/... or ``not_found``), under the subject itself,
        then the updates newer than that answer.  The request is repeated every
        ``initial_retry`` s; after ``initial_timeout`` s without an answer the
        updates flow without it (counted as ``initial timeouts``).

        A pattern subscription is announced on the backbone (``_INTEREST.ANNOUNCE``,
        docs/subjects.md) so gateways know someone wants it; ``announce=False``
        is for a client that takes everything to serve others (a gateway, the cache).
        """
        if not self.subscribing:
            raise FyrehoseError("this client was created with subscribe=False")
        if pattern is not None:
            check_pattern(pattern)
        if initial and (pattern is None or not is_literal(pattern)):
            raise ValueError("initial values are per subject: give a subject without wildcards")
        subscription = Subscription(on_loss, max_queued, pattern, max_queued_bytes, pump=self._pump)
        with self._lock:
            if self._tracker is None:
                self.connection.track(from_seq)
            elif from_seq is not None and (self._tracker.next is None or from_seq < self._tracker.next):
                raise FyrehoseError("from_seq must be given on the first subscription of a client")
        now = time.monotonic()
        if initial:
            subscription.gate = InitialGate(pattern, now, timeout=initial_timeout, retry=initial_retry)  # type: ignore[arg-type]  # initial=True requires a subject pattern, checked above
        self._router.add(subscription, now)
        if pattern is not None and announce:
            self.interest.add(pattern)
            self._announced[subscription] = pattern
        return subscription

    def unsubscribe(self, subscription: Subscription) -> None:
        """End a subscription (its iterator stops); one that asked for an initial value sends ``_SUB.STOP``."""
        stopped = self._router.remove(subscription)
        announced = self._announced.pop(subscription, None)
        if announced is not None:
            self.interest.remove(announced)
        if stopped is not None:
            self._send_unconfirmed(self.subjects.seal(Envelope(SUB_STOP_PREFIX + stopped)))
        subscription._close()

    def request(self, subject: str, data: bytes = b"", *, timeout: float = 2.0, retry: float | None = None,
                type: MsgType = MsgType.UPDATE) -> SubjectMessage:
        """Publish an envelope whose reply is a fresh ``_INBOX`` subject and return the first answer on it.

        With ``retry`` the request is published again (on a new inbox) every
        ``retry`` seconds until an answer or ``timeout``; use it for requests
        that are safe to repeat.  Raises :class:`RequestTimeout`.
        """
        if not self.subscribing:
            raise FyrehoseError("request() needs a client created with subscribe=True")
        with self._lock:
            self.connection.track()
        answers: queue.Queue = queue.Queue()
        inboxes = []
        deadline = time.monotonic() + timeout
        try:
            while True:
                reply = self.subjects.new_inbox()
                inboxes.append(reply)
                self._router.add_waiter(reply, answers)
                self._send_unconfirmed(self.subjects.seal(Envelope(subject, bytes(data), type, reply=reply)))
                remaining = deadline - time.monotonic()
                try:
                    return answers.get(timeout=max(0.0, min(remaining, retry or remaining)))
                except queue.Empty:
                    if time.monotonic() >= deadline or self._closed:
                        raise RequestTimeout(f"no answer to {subject} within {timeout:g} s") from None
        finally:
            self._router.remove_waiters(inboxes)

    def snapshot(self, subject: str, *, timeout: float = 2.0, retry: float = 0.5) -> SubjectMessage:
        """The cache's answer to ``_SNAP.<subject>``, under ``subject``: type ``initial`` with the value and
        its status, ``snap``/``not_found`` when there is no record, ``drop``/``relocate`` for a moved one.

        The answer's ``record_seq`` is the sequence of the message that last
        changed the record (None from a cache too old to report it)."""
        answer = self.request(SNAP_PREFIX + subject, WITH_SEQUENCE, timeout=timeout, retry=retry)
        return SubjectMessage(answer.seq, replace(answer.envelope, subject=subject))

    def _send_start(self, start: Envelope) -> None:
        """Send (again) the START of a gated subscription; the router calls it with the route lock held."""
        self._send_unconfirmed(self.subjects.seal(start))

    def _emit(self, events: list[Event]) -> None:
        if self.auth is None and not self._router.wants_envelopes and not any(type(e) is Lost for e in events):
            self._router.route_raw(events)  # type: ignore[arg-type]  # no Lost among them: all Messages
            return
        for event in events:
            if isinstance(event, Lost):
                self.stats["lost"] += event.count
                self._router.offer_lost(event)
            else:
                self._route(event)

    def _route(self, message: Message) -> None:
        """One message in sequence order: authenticate it, then hand it to the subscriptions it matches."""
        opened: Envelope | None = None
        router = self._router
        if envelope.is_envelope(message.data) and (self.auth is not None or (
                router.wants_envelopes and router.wants_envelope(envelope.peek_subject(message.data)))):
            opened, accepted, answers = self.subjects.open(message.data, wall_us())
            for answer in answers:
                self._send_unconfirmed(answer)
            if not accepted:
                return
        self._router.route(message, opened)

    # ------------------------------------------------------------ the receive thread

    @property
    def _tracker(self) -> SequenceTracker | None:
        return self.connection.tracker

    def _run(self) -> None:
        self._loop.run(lambda: not self._closed)

    def _pump(self) -> None:
        """Called by a subscription's reader as it reaches each datagram's messages: drain the socket here.

        The receive thread needs the interpreter to read, and an application
        iterating in a tight loop holds it, handing it over only every few
        milliseconds (the switch interval), which at a million messages per
        second overflows the socket buffer.  The reader holds the interpreter
        anyway, so it reads what is waiting itself.  When the receive thread
        holds the loop's guard it is waiting for the interpreter in the middle
        of a read: the reader waits for the guard, which hands the interpreter
        over at once instead of after a switch interval.  Timers that are due
        (a hole to REQUEST) run here too.
        """
        self._loop.pump()

    def _next_deadline(self) -> float:
        return min(self.core.next_deadline(), self._router.next_deadline())

    def _handle_timers(self, now: float) -> None:
        """Everything due at ``now``: the core's timers (the publishes' under the lock publishing threads share) and
        the initial-value gates'."""
        with self._lock:
            due = self.core.handle_timers(now, wall_us())
            self._finish_publishes(due.finished)
        self._send_to_backbone(due.datagrams)
        if due.events:
            self._emit(due.events)
        timed_out = self._router.handle_timers(now)
        if timed_out:
            self.stats["initial timeouts"] += timed_out

    def _finish_publishes(self, finished: list[Finished]) -> None:
        """Hand finished batches to the threads waiting in publish (the lock is held)."""
        if finished:
            for batch in finished:
                self._published[batch.batch] = batch
            self._confirmed.notify_all()

    def _handle(self, data: bytes, source: Address, now: float, from_group: bool = False) -> None:
        """One datagram, whatever its bytes or sender, through the pure connection (docs/protocol.md)."""
        if from_group:
            incoming = self.connection.receive_group(data, source, now)
        elif data[:1] == _CONFIRM:  # only a CONFIRM touches the publish state that publishing threads share
            with self._lock:
                incoming = self.connection.receive(data, source, now)
                self._finish_publishes(incoming.published)
        else:
            incoming = self.connection.receive(data, source, now)
        if incoming.stored and self.held is not None:
            self.held.add_many(incoming.stored)
        if incoming.runs:
            self._take_runs(incoming.runs)
        if incoming.events:
            self._emit(incoming.events)
        if incoming.acked:
            self._acked.set()
        if incoming.fell_back:
            self._loop.leave_group()
        for forward in incoming.forwards:
            try:
                self._forwards.put_nowait(forward)
            except queue.Full:
                self.stats["forwards dropped"] += 1
                self.connection.forward_done(forward)

    def _take_runs(self, runs: list[FrameRun]) -> None:
        """Whole backbone datagrams that continue the stream: kept and routed as they are where nothing needs
        their messages one by one (so the receive thread's cost is per datagram), else taken apart here."""
        held = self.held
        if isinstance(held, RecentMessages):
            for run in runs:
                held.add_run(run)
        elif held is not None:
            for run in runs:
                held.add_many(run.messages())
        if self.auth is None and not self._router.wants_envelopes:
            self._router.route_runs(runs)
            return
        for run in runs:
            if self.auth is not None or not self._router.route_chosen(run, self._open_plain):
                self._emit([Message(seq, payload) for seq, payload in run.messages()])

    def _open_plain(self, payload: bytes) -> Envelope | None:
        """A chosen message's envelope, without credentials (nothing to verify); None when it is damaged."""
        return self.subjects.open(payload, wall_us())[0]

    # ------------------------------------------------------------ serving FORWARDs

    def _forward_loop(self) -> None:
        bucket = forward_bucket(self._forward_rate)
        while not self._closed:
            try:
                forward = self._forwards.get(timeout=0.2)
            except queue.Empty:
                continue
            if forward is None or self.held is None:
                return
            self.connection.forward_done(forward)
            answer_forward(forward, self.held, bucket, self._send_to, self.stats, style=THREADS,
                           stopped=lambda: self._closed)

    def _send_to(self, datagram: bytes, target: Address) -> bool:
        return sent(self.sock, datagram, target)
