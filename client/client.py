"""The blocking fyrehose client for scripts: publish, subscribe in order, and serve FORWARDs.

It is a thin I/O driver around the pure codec and :class:`SequenceTracker`: one
receive thread (which also runs the timers: KEEPALIVE, gap REQUESTs, give-ups)
and one forwarder thread that paces re-DELIVERs.  Under gevent's monkey
patching those threads are greenlets and every wait is cooperative.

Delivery guarantee of :meth:`Client.publish`: when it returns ``seq`` the
backbone has sequenced the message exactly once under that number and sent it
to every live subscriber.  A PUSH or CONFIRM lost on the way is retried with
the same tag, and the backbone answers a retry of an already sequenced tag
with the original number instead of sequencing it again (it remembers tags for
30 s, longer than any ``timeout`` allowed here).  If the backbone restarts
between the first PUSH and a retry, that memory is gone and the message may be
published twice.  When ``publish`` raises :class:`PublishTimeout` the message
may or may not have been published.
"""
from __future__ import annotations

import itertools
import os
import queue
import random
import socket
import threading
import time
from collections import Counter, deque
from typing import Iterable, Protocol

from fyrehose import codec
from fyrehose.addresses import Address, parse_hostport
from fyrehose.memjournal import MemoryJournal
from fyrehose.pacing import TokenBucket
from fyrehose.tracker import Event, Lost, Message, SequenceTracker

class MessageStore(Protocol):
    """Where a client keeps delivered messages to answer FORWARDs from."""

    def add(self, seq: int, data: bytes) -> None: ...

    def held(self, from_seq: int, to_seq: int) -> Iterable[tuple[int, bytes]]: ...


MAX_PUBLISH_TIMEOUT = 25.0  # below the backbone's 30 s memory of confirmed tags
_CLOSED = object()


class FyrehoseError(Exception):
    """Base of the client's own errors."""


class BackboneUnreachable(FyrehoseError):
    pass


class PublishTimeout(FyrehoseError):
    """No CONFIRM in time: the message may or may not have been published."""


class MessagesLost(FyrehoseError):
    """Raised by a subscription for sequences that will never arrive; iteration may continue after it."""

    def __init__(self, lost: Lost) -> None:
        super().__init__(f"messages {lost.from_seq}..{lost.to_seq} lost ({lost.reason})")
        self.lost = lost


class Subscription:
    """The ordered stream of one :meth:`Client.subscribe` call; iterate it or call :meth:`get`.

    With ``on_loss="raise"`` (default) a permanent loss raises
    :class:`MessagesLost` from ``__next__``/``get`` and the stream goes on after
    it; with ``on_loss="yield"`` a :class:`Lost` event is returned in line.
    At most ``max_queued`` events wait for the reader; beyond that the surplus
    becomes a ``Lost`` range with reason "subscriber overrun".
    """

    def __init__(self, on_loss: str = "raise", max_queued: int = 1_000_000) -> None:
        if on_loss not in ("raise", "yield"):
            raise ValueError("on_loss must be 'raise' or 'yield'")
        self.on_loss = on_loss
        self.max_queued = max_queued
        self._queue: queue.Queue = queue.Queue()
        self._overrun: tuple[int, int] | None = None
        self.closed = False

    def __iter__(self) -> "Subscription":
        return self

    def __next__(self) -> Event:
        event = self.get()
        if event is None:
            raise StopIteration
        return event

    def get(self, timeout: float | None = None) -> Event | None:
        """The next event; None when ``timeout`` passes or the client closed."""
        try:
            item = self._queue.get(timeout=timeout)
        except queue.Empty:
            return None
        if item is _CLOSED:
            self._queue.put(_CLOSED)  # every later call ends too
            return None
        if isinstance(item, Lost) and self.on_loss == "raise":
            raise MessagesLost(item)
        return item

    def _offer(self, event: Event) -> None:
        first = event.seq if isinstance(event, Message) else event.from_seq
        last = event.seq if isinstance(event, Message) else event.to_seq
        if self._queue.qsize() >= self.max_queued:
            self._overrun = (self._overrun[0] if self._overrun else first, last)
            return
        if self._overrun:
            self._queue.put(Lost(self._overrun[0], self._overrun[1], "subscriber overrun"))
            self._overrun = None
        self._queue.put(event)

    def _close(self) -> None:
        self.closed = True
        self._queue.put(_CLOSED)


class Client:
    """A backbone client; use as a context manager or call :meth:`close`.

    ``subscribe=False`` sets NOSUBSCRIBE (a pure publisher); ``journal=False``
    sets NOJOURNAL.  A client that does not subscribe holds nothing to serve, so
    it is NOJOURNAL too.  ``journal_bytes`` bounds the in-memory journal that
    answers FORWARDs, ``forward_rate`` paces those answers (messages/s);
    ``store`` replaces that in-memory journal with another :class:`MessageStore`
    (the disk journal does).
    """

    def __init__(
        self,
        backbone: Address | str = ("127.0.0.1", 2323),
        *,
        subscribe: bool = True,
        journal: bool = True,
        batch: bool = True,
        journal_bytes: int = 64 << 20,
        keepalive_interval: float = 0.5,
        unreachable_after: float = 5.0,
        confirm_retry: float = 0.2,
        request_delay: float = 0.02,
        give_up_after: float = 10.0,
        forward_rate: float = 50_000,
        bind: Address = ("0.0.0.0", 0),
        store: "MessageStore | None" = None,
    ) -> None:
        if isinstance(backbone, str):
            backbone = parse_hostport(backbone, 2323)
        if not 0 < keepalive_interval <= 1.0:
            raise ValueError("keepalive_interval must be in (0, 1] seconds (seeds/000 client rule 1)")
        self.backbone: Address = backbone
        self.subscribing = subscribe
        self.journaling = journal and subscribe and journal_bytes > 0
        self.flags = codec.FLAG_HEAD
        if not subscribe:
            self.flags |= codec.FLAG_NOSUBSCRIBE
        if not self.journaling:
            self.flags |= codec.FLAG_NOJOURNAL
        if batch:
            self.flags |= codec.FLAG_BATCH
        self.keepalive_interval = keepalive_interval
        self.unreachable_after = unreachable_after
        self.confirm_retry = confirm_retry
        self._tracker_options = {"request_delay": request_delay, "give_up_after": give_up_after}
        self.stats: Counter[str] = Counter()
        if store is not None and self.journaling:
            self.journal: MessageStore | None = store
        else:
            self.journal = MemoryJournal(journal_bytes) if self.journaling else None
        self._forward_rate = forward_rate

        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        except OSError:
            pass
        self.sock.bind(bind)
        self.address: Address = self.sock.getsockname()

        self._closed = False
        self._lock = threading.Lock()
        self._confirmed = threading.Condition(self._lock)
        self._pending: dict[int, int | None] = {}  # tag -> sequence once confirmed
        self._tags = itertools.count(random.getrandbits(40) + 1)
        self._tokens: deque[bytes] = deque(maxlen=8)
        self._last_ack: float | None = None
        self._acked = threading.Event()
        self._next_keepalive = 0.0
        self._tracker: SequenceTracker | None = None
        self._subscriptions: list[Subscription] = []
        self._forwards: queue.Queue = queue.Queue(maxsize=1024)
        self._pack: list[bytes] = []
        self._pack_size = 0
        self._pack_lock = threading.Lock()

        self._reader = threading.Thread(target=self._run, name="fyrehose-client", daemon=True)
        self._forwarder = threading.Thread(target=self._forward_loop, name="fyrehose-forwarder", daemon=True)
        self._reader.start()
        self._forwarder.start()
        if not self._acked.wait(unreachable_after):
            self.close()
            host, port = backbone
            raise BackboneUnreachable(f"no KEEPALIVE-ACK from {host}:{port} within {unreachable_after:g} s")

    # ------------------------------------------------------------ lifecycle

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._closed:
            return
        self.flush()
        self._closed = True
        try:  # stop deliveries and FORWARDs now rather than after the 5 s lifetime
            goodbye = codec.Keepalive(flags=codec.FLAG_NOSUBSCRIBE | codec.FLAG_NOJOURNAL, token=os.urandom(16))
            self.sock.sendto(codec.encode(goodbye), self.backbone)
        except OSError:
            pass
        try:
            self._forwards.put_nowait(None)
        except queue.Full:
            pass
        for thread in (self._reader, self._forwarder):
            if thread is not threading.current_thread():
                thread.join(2.0)
        with self._lock:
            self._confirmed.notify_all()
        for subscription in self._subscriptions:
            subscription._close()
        self.sock.close()

    @property
    def reachable(self) -> bool:
        return self._last_ack is not None and time.monotonic() - self._last_ack < self.unreachable_after

    def _check_reachable(self) -> None:
        if self._closed:
            raise FyrehoseError("client is closed")
        if not self.reachable:
            host, port = self.backbone
            raise BackboneUnreachable(f"no KEEPALIVE-ACK from {host}:{port} for {self.unreachable_after:g} s")

    # ------------------------------------------------------------ publishing

    def _next_tag(self) -> int:
        tag = next(self._tags) & codec.MAX_TAG
        return tag or next(self._tags) & codec.MAX_TAG

    def publish(self, data: bytes, timeout: float = 5.0) -> int:
        """Publish ``data`` and return its sequence number once the backbone confirmed it."""
        return self.publish_many([data], timeout=timeout)[0]

    def publish_many(self, items: Iterable[bytes], *, timeout: float = 10.0, window: int = 2048) -> list[int]:
        """Publish several messages packed into few datagrams; their sequence numbers, in order.

        At most ``window`` messages are unconfirmed at a time.  The guarantee is
        that of :meth:`publish`; ``timeout`` bounds each window, not the whole call.
        """
        if not 0 < timeout <= MAX_PUBLISH_TIMEOUT:
            raise ValueError(f"timeout must be in (0, {MAX_PUBLISH_TIMEOUT:g}] seconds")
        payloads = [bytes(item) for item in items]
        for payload in payloads:
            if len(payload) > codec.MAX_PAYLOAD:
                raise codec.PayloadTooLarge(len(payload))
        seqs: list[int] = []
        for start in range(0, len(payloads), window):
            seqs.extend(self._publish_window(payloads[start:start + window], timeout))
        return seqs

    def _publish_window(self, payloads: list[bytes], timeout: float) -> list[int]:
        self._check_reachable()
        tags = [self._next_tag() for _ in payloads]
        frames = {tag: codec.encode_push(payload, tag) for tag, payload in zip(tags, payloads)}
        with self._lock:
            for tag in tags:
                self._pending[tag] = None
        deadline = time.monotonic() + timeout
        retry = self.confirm_retry
        try:
            unconfirmed = tags
            while True:
                for datagram in codec.pack_greedy(frames[tag] for tag in unconfirmed):
                    self.sock.sendto(datagram, self.backbone)
                    self.stats["push datagrams"] += 1
                wait_until = min(deadline, time.monotonic() + retry)
                with self._lock:
                    while not self._closed:
                        unconfirmed = [tag for tag in unconfirmed if self._pending[tag] is None]
                        remaining = wait_until - time.monotonic()
                        if not unconfirmed or remaining <= 0:
                            break
                        self._confirmed.wait(remaining)
                    if self._closed:
                        raise FyrehoseError("client closed while publishing")
                    if not unconfirmed:
                        return [self._pending[tag] for tag in tags]  # type: ignore[misc]
                if time.monotonic() >= deadline:
                    self._check_reachable()
                    raise PublishTimeout(
                        f"{len(unconfirmed)} of {len(tags)} messages unconfirmed after {timeout:g} s; "
                        "they may or may not have been published"
                    )
                self.stats["push retries"] += len(unconfirmed)
                retry = min(retry * 2, 1.0)
        finally:
            with self._lock:
                for tag in tags:
                    self._pending.pop(tag, None)

    def publish_nowait(self, data: bytes) -> None:
        """Queue ``data`` for an unconfirmed, packed PUSH; sent when a datagram fills or on :meth:`flush`.

        No retry and no sequence number: the fastest and weakest way to publish
        (seeds/000 client rule 5: the PUSH may be lost).
        """
        frame = codec.encode_push(bytes(data))
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
            self.sock.sendto(b"".join(self._pack), self.backbone)
        self._pack = []
        self._pack_size = 0

    # ------------------------------------------------------------ subscribing

    def subscribe(self, from_seq: int | None = None, *, on_loss: str = "raise",
                  max_queued: int = 1_000_000) -> Subscription:
        """An ordered, gap-free stream of the messages delivered from now on (or from ``from_seq``).

        ``from_seq`` backfills older messages through REQUESTs; it must be given
        before this client starts tracking (on its first subscription).
        """
        if not self.subscribing:
            raise FyrehoseError("this client was created with subscribe=False")
        subscription = Subscription(on_loss, max_queued)
        with self._lock:
            if self._tracker is None:
                self._tracker = SequenceTracker(from_seq, **self._tracker_options)
            elif from_seq is not None and (self._tracker.next is None or from_seq < self._tracker.next):
                raise FyrehoseError("from_seq must be given on the first subscription of a client")
            self._subscriptions.append(subscription)
        return subscription

    def _emit(self, events: list[Event]) -> None:
        for event in events:
            if isinstance(event, Lost):
                self.stats["lost"] += event.count
            for subscription in self._subscriptions:
                if not subscription.closed:
                    subscription._offer(event)

    # ------------------------------------------------------------ the receive thread

    def _run(self) -> None:
        sock = self.sock
        while not self._closed:
            now = time.monotonic()
            self._timers(now)
            deadline = self._next_keepalive
            tracker = self._tracker
            if tracker is not None:
                tracker_deadline = tracker.next_deadline()
                if tracker_deadline is not None:
                    deadline = min(deadline, tracker_deadline)
            sock.settimeout(min(max(deadline - time.monotonic(), 0.001), 0.1))
            try:
                data, source = sock.recvfrom(65536)
            except (socket.timeout, BlockingIOError):
                continue
            except OSError:
                if self._closed:
                    return
                self.stats["receive errors"] += 1
                continue
            try:
                self._handle(data, source, time.monotonic())
            except codec.ProtocolError:
                self.stats["malformed"] += 1

    def _timers(self, now: float) -> None:
        if now >= self._next_keepalive:
            token = os.urandom(codec.TOKEN_SIZE)
            self._tokens.append(token)
            keepalive = codec.Keepalive(flags=self.flags, token=token)
            try:
                self.sock.sendto(codec.encode(keepalive), self.backbone)
            except OSError:
                self.stats["send errors"] += 1
            self._next_keepalive = now + self.keepalive_interval
        tracker = self._tracker  # touched only by this thread once created
        if tracker is None:
            return
        requests, events = tracker.poll(now)
        self._emit(events)
        for from_seq, to_seq in requests:
            request = codec.Request("0.0.0.0", 0, from_seq, to_seq)
            try:
                self.sock.sendto(codec.encode(request), self.backbone)
                self.stats["requests"] += 1
            except OSError:
                self.stats["send errors"] += 1

    def _handle(self, data: bytes, source: Address, now: float) -> None:
        kind = data[0]
        if kind == codec.DELIVER:
            spans, error = codec.scan(data, codec.DELIVER)
            if error:
                self.stats["malformed"] += 1
            self._deliver(data, spans, now)
        elif kind == codec.CONFIRM:
            frames = codec.decode(data)
            with self._lock:
                for frame in frames:
                    if isinstance(frame, codec.Confirm) and frame.tag in self._pending:
                        self._pending[frame.tag] = frame.seq
                self._confirmed.notify_all()
        elif kind == codec.KEEPALIVE_ACK:
            (ack,) = codec.decode(data)
            if ack.token in self._tokens and source == self.backbone:
                self._last_ack = now
                self._acked.set()
                if ack.head and self._tracker is not None:
                    self._tracker.head(ack.head, now)
        elif kind == codec.FORWARD:
            (forward,) = codec.decode(data)
            if source != self.backbone:
                self.stats["forwards from strangers"] += 1
            elif self.journal is None:
                self.stats["forwards ignored"] += 1
            else:
                try:
                    self._forwards.put_nowait(forward)
                except queue.Full:
                    self.stats["forwards dropped"] += 1
        else:
            self.stats["malformed"] += 1

    def _deliver(self, data: bytes, spans: list[tuple[int, int, int]], now: float) -> None:
        journal = self.journal
        tracker = self._tracker
        events: list[Event] = []
        header = codec.FRAME_HEADER
        for start, end, seq in spans:
            if not seq:
                self.stats["malformed"] += 1
                continue
            payload = data[start + header:end]
            if journal is not None:
                journal.add(seq, payload)
            if tracker is not None:
                events.extend(tracker.deliver(seq, payload, now))
        self.stats["delivered frames"] += len(spans)
        if events:
            self._emit(events)

    # ------------------------------------------------------------ serving FORWARDs

    def _forward_loop(self) -> None:
        bucket = TokenBucket(self._forward_rate, burst=256, now=time.monotonic())
        while not self._closed:
            try:
                forward = self._forwards.get(timeout=0.2)
            except queue.Empty:
                continue
            if forward is None or self.journal is None:
                return
            target = (forward.addr, forward.port)
            for seq, payload in self.journal.held(forward.from_seq, forward.to_seq):
                if self._closed:
                    return
                delay = bucket.wait_time(time.monotonic())
                while delay > 0:
                    time.sleep(delay)
                    delay = bucket.wait_time(time.monotonic())
                try:
                    self.sock.sendto(codec.encode_deliver(seq, payload), target)
                    self.stats["forwarded"] += 1
                except OSError:
                    self.stats["send errors"] += 1
