"""The Locust users: thin gevent drivers around the fyrehose client and the measuring subscriber session.

Locust has patched the process with gevent before this module loads, so the
Client's threads are greenlets and every socket wait here is cooperative.
Both classes get the process's :class:`ProcessRun` as the class attribute
``load`` when a test starts (see locustfile.py).
"""
from __future__ import annotations

import logging
import random
import socket
import time

import gevent
import gevent.event
import gevent.queue
from locust import User, task

from fyrehose import codec
from fyrehose.addresses import parse_hostport, route_source
from fyrehose.client import BackboneUnreachable, Client, FyrehoseError, MessagesLost, PublishTimeout
from fyrehose.loadtest.account import DeliveryAccount
from fyrehose.loadtest.coordination import ProcessRun
from fyrehose.loadtest.push_session import PushSession
from fyrehose.loadtest.rates import Pacer
from fyrehose.loadtest.session import SubscriberSession
from fyrehose.loadtest.stamp import stamp
from fyrehose.loadtest.tally import RunTally
from fyrehose.pacing import TokenBucket
from fyrehose.publishing import Finished
from fyrehose.sockets import enlarge_buffers
from fyrehose.tracker import Event, Lost

PUSH = "PUSH"
DELIVER = "DELIVER"
ACK_WAIT = 5.0  # seconds a subscriber waits for its first KEEPALIVE-ACK
PUMP_SLICE = 1.0  # seconds one receive task runs, so Locust can stop the user between tasks
FORWARD_RATE = 50_000  # re-DELIVERs per second, as the Client paces them
SOCKET_BUFFER = 8 << 20

logger = logging.getLogger(__name__)


class Publisher(User):
    """Publishes stamped messages with CONFIRM at its share of the offered rate; each round trip is one PUSH request.

    With ``--batch N`` a request is N messages (one stamp: one publish time)
    packed into tagged PUSH datagrams of the process's :class:`PushChannel`,
    confirmed together; without, one ``Client.publish`` of this user's own
    client.
    """

    load: ProcessRun

    def on_start(self) -> None:
        settings = self.load.settings
        self.batch = settings.batch
        if self.batch:
            self.channel = PushChannel.of_process(settings.backbone, settings.timeout)
        else:
            self.client = Client(settings.backbone, subscribe=False)
        self.request_name = f"publish x{self.batch}" if self.batch else "publish"
        start = max(self.load.elapsed(), 0.0)  # users start during the lead-in, before the first phase
        rate = self._rate(start)
        self.pacer = Pacer(start + (random.random() / rate if rate > 0 else 0.0))

    def _rate(self, elapsed: float) -> float:
        """Requests per second this user offers at ``elapsed``."""
        return self.load.user_rate(elapsed) / max(self.batch, 1)

    def wait_time(self) -> float:
        elapsed = self.load.elapsed()
        if elapsed < 0:
            return -elapsed
        return self.pacer.wait(elapsed, self._rate(elapsed))

    @task
    def publish(self) -> None:
        run = self.load
        elapsed = run.elapsed()
        if not self.pacer.take(elapsed, self._rate(elapsed)):
            return
        phase = run.schedule.index_at(elapsed)  # now: while publishing, a truncation may replace the schedule
        payload = stamp(time.time_ns(), run.settings.size)
        count = max(self.batch, 1)
        error: Exception | None = None
        started = time.perf_counter()
        if self.batch:
            if not self.channel.publish([payload] * count):
                error = PublishTimeout(f"{count} messages not all confirmed within {run.settings.timeout:g} s")
        else:
            try:
                self.client.publish(payload, timeout=run.settings.timeout)
            except FyrehoseError as exc:
                error = exc
        response_ms = (time.perf_counter() - started) * 1000
        self.environment.events.request.fire(
            request_type=PUSH, name=self.request_name, response_time=response_ms, response_length=len(payload) * count,
            exception=error, context={},
        )
        run.count_push(phase, response_ms, error is not None, count)

    def on_stop(self) -> None:
        if not self.batch:
            self.client.close()


class PushChannel:
    """The Locust process's one socket and :class:`PushSession`, driven by one greenlet; users wait on events."""

    _process: PushChannel | None = None

    @classmethod
    def of_process(cls, backbone: str, timeout: float) -> PushChannel:
        if cls._process is None:
            cls._process = cls(parse_hostport(backbone), timeout)
        return cls._process

    def __init__(self, backbone: tuple[str, int], timeout: float) -> None:
        self.backbone = backbone
        self.session = PushSession(backbone, timeout=timeout)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        enlarge_buffers(self.sock, SOCKET_BUFFER)
        self.sock.bind((route_source(backbone), 0))
        self._waiting: dict[int, gevent.event.AsyncResult] = {}
        self._pump = gevent.spawn(self._run)
        deadline = time.monotonic() + ACK_WAIT
        while not self.session.acked and time.monotonic() < deadline:
            gevent.sleep(0.01)
        if not self.session.acked:
            self._pump.kill()
            self.sock.close()
            raise BackboneUnreachable(f"no KEEPALIVE-ACK from {backbone[0]}:{backbone[1]} within {ACK_WAIT:g} s")

    def publish(self, payloads: list[bytes]) -> bool:
        """Publish ``payloads`` as one batch; whether every message was CONFIRMed in time."""
        number, datagrams = self.session.publish(payloads, time.monotonic())
        result = self._waiting[number] = gevent.event.AsyncResult()
        for datagram in datagrams:
            self._send(datagram)
        # the pump finishes every batch by its timeout (it wakes at least every 50 ms); waiting longer
        # than that means the pump is gone, and the batch counts as not confirmed rather than hanging the user
        confirmed = result.wait(self.session.timeout + 1.0) is True
        self._waiting.pop(number, None)
        return confirmed

    def _send(self, datagram: bytes) -> None:
        try:
            self.sock.sendto(datagram, self.backbone)
        except OSError:
            self.session.stats["send errors"] += 1  # a full send buffer: the retry sends it again

    def _run(self) -> None:
        session = self.session
        sock = self.sock
        while True:
            now = time.monotonic()
            sends, finished = session.poll(now)
            for datagram in sends:
                self._send(datagram)
            self._resolve(finished)
            sock.settimeout(min(max(session.next_deadline() - time.monotonic(), 0.001), 0.05))
            try:
                datagram, source = sock.recvfrom(65536)
            except TimeoutError:
                continue
            except OSError:
                session.stats["receive errors"] += 1
                continue
            self._resolve(session.receive(datagram, source, time.monotonic()))

    def _resolve(self, finished: list[Finished]) -> None:
        for batch in finished:
            waiter = self._waiting.pop(batch.batch, None)
            if waiter is not None:
                waiter.set(batch.confirmed)


class Subscriber(User):
    """Subscribes, recovers gaps with its peers, and reports each message's publish-to-deliver time as DELIVER.

    What the backbone delivered and what peers re-delivered is counted per
    phase (loss before and after recovery).  In Locust's statistics a message
    the backbone delivered is a DELIVER named "publish-to-deliver", one a peer
    re-delivered after a REQUEST is named "recovered", and a range given up is
    a failed DELIVER named "lost".
    """

    load: ProcessRun
    fixed_count = 2  # replaced by --subscribers when Locust initialises

    def on_start(self) -> None:
        settings = self.load.settings
        self.backbone = parse_hostport(settings.backbone)
        self.session = SubscriberSession(self.backbone, DeliveryAccount(self.load.phase_of_ns),
                                         give_up_after=max(settings.drain, 0.5))
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        enlarge_buffers(self.sock, SOCKET_BUFFER, (socket.SO_RCVBUF,))
        self.sock.bind(("0.0.0.0", 0))
        self.sock_address = self.sock.getsockname()
        self.forwards: gevent.queue.Queue = gevent.queue.Queue(maxsize=1024)
        self.forwarder = gevent.spawn(self._serve_forwards)
        self._pump(time.monotonic() + ACK_WAIT, until_acked=True)
        if not self.session.acked:
            self.on_stop()  # Locust calls on_stop only for users that started
            host, port = self.backbone
            raise BackboneUnreachable(f"no KEEPALIVE-ACK from {host}:{port} within {ACK_WAIT:g} s")
        self.load.subscribers.append(self)

    @task
    def receive(self) -> None:
        self._pump(time.monotonic() + PUMP_SLICE)

    def _pump(self, until: float, until_acked: bool = False) -> None:
        session = self.session
        sock = self.sock
        now = time.monotonic()
        while now < until and not (until_acked and session.acked):
            sends, events = session.poll(now)
            for datagram in sends:
                self._send(datagram, self.backbone)
            self._report(events)
            sock.settimeout(min(max(session.deadline() - now, 0.001), until - now))
            try:
                datagram, source = sock.recvfrom(65536)
            except TimeoutError:
                now = time.monotonic()
                continue
            except OSError:
                session.stats["receive errors"] += 1
                now = time.monotonic()
                continue
            now = time.monotonic()
            events, forward = session.receive(datagram, source, now)
            self._report(events)
            if forward is not None:
                if self.forwards.full():
                    session.stats["forwards dropped"] += 1
                    session.forward_done(forward)
                else:
                    self.forwards.put_nowait(forward)

    def _report(self, events: list[Event]) -> None:
        """Each message's latency into the tally; to Locust, one DELIVER per message, or with ``--batch``
        one per run of messages released together (the statistics' own cost is per request)."""
        fire = self.environment.events.request.fire
        batched = self.load.settings.batch > 0
        run: dict[str, list[float]] = {}  # name -> [latency of its first message, bytes]
        for item in self.session.release(events, time.time_ns()):
            if isinstance(item, Lost):
                fire(request_type=DELIVER, name="lost", response_time=None, response_length=0,
                     exception=MessagesLost(item), context={})
                continue
            name = "recovered" if item.recovered else "publish-to-deliver"
            if not batched:
                for _ in range(item.messages):
                    fire(request_type=DELIVER, name=name, response_time=item.latency_ms,
                         response_length=item.size // item.messages, exception=None, context={})
                continue
            run.setdefault(name, [item.latency_ms, 0])[1] += item.size
        for name, (latency, size) in run.items():
            fire(request_type=DELIVER, name=name, response_time=latency, response_length=size, exception=None,
                 context={})

    def _serve_forwards(self) -> None:
        """Re-DELIVERs what a peer REQUESTed from this subscriber's journal, paced like the Client's forwarder."""
        bucket = TokenBucket(FORWARD_RATE, burst=256, now=time.monotonic())
        while True:
            forward = self.forwards.get()
            target = (forward.addr, forward.port)
            for seq, payload in self.session.journal.held(forward.from_seq, forward.to_seq):
                delay = bucket.wait_time(time.monotonic())
                while delay > 0:
                    gevent.sleep(delay)
                    delay = bucket.wait_time(time.monotonic())
                self._send(codec.encode_deliver(seq, payload), target)
            self.session.forward_done(forward)

    def _send(self, datagram: bytes, target: tuple[str, int]) -> None:
        try:
            self.sock.sendto(datagram, target)
        except OSError:
            self.session.stats["send errors"] += 1

    def finish(self) -> None:
        self._report(self.session.finish(time.monotonic()))

    def snapshot(self) -> RunTally:
        return self.session.snapshot()

    def on_stop(self) -> None:
        self.forwarder.kill()
        self.sock.close()
        if self.session.stats:  # REQUESTs sent, datagrams dropped and why: in locust.log
            logger.info("subscriber %s:%d: %s", *self.sock_address, dict(self.session.stats))
