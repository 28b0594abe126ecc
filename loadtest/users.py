"""The Locust users: thin gevent drivers around the load test's pure publisher and measuring subscriber.

Both drive pure state machines (:class:`ConfirmedPublisher`, :class:`MeasuringSubscriber`)
over non-blocking sockets; every wait is a gevent wait on the process's one
loop, and no thread is started.
Both classes get the process's :class:`ProcessRun` as the class attribute
``load`` when a test starts (see locustfile.py).
"""
from __future__ import annotations

import logging
import random
import socket
import time
from dataclasses import dataclass

import gevent
import gevent.event
import gevent.queue
from gevent.socket import wait_write
from locust import User, task
from locust.env import Environment

from fyrehose.drivers.backbone_io import (
    RECEIVE_BUFFER,
    UNREACHABLE_AFTER,
    answer_forward,
    await_ack,
    forward_bucket,
    gevent_style,
    open_socket,
)
from fyrehose.drivers.receive_loop import ReceiveLoop
from fyrehose.errors import MessagesLost, PublishTimeout
from fyrehose.loadtest.account import DeliveryAccount
from fyrehose.loadtest.confirmed_publisher import ConfirmedPublisher
from fyrehose.loadtest.coordination import ProcessRun
from fyrehose.loadtest.measuring_subscriber import Delivery, MeasuringSubscriber
from fyrehose.loadtest.rates import Pacer
from fyrehose.loadtest.stamp import stamp
from fyrehose.loadtest.tally import RunTally
from fyrehose.net.addresses import parse_hostport
from fyrehose.protocol.forwarding import FORWARD_RATE
from fyrehose.protocol.publishing import Finished
from fyrehose.protocol.tracker import Lost

PUSH = "PUSH"
DELIVER = "DELIVER"
PUMP_SLICE = 1.0  # seconds one receive task runs, so Locust can stop the user between tasks
REPORT_EVERY = 256  # deliveries a subscriber reports to Locust at the latest, when its socket never runs dry
READ_ROUND = 256  # datagrams a user's receive loop reads in a row before the other greenlets get a turn
SEND_WAIT = 0.05  # seconds a send waits for room in a full socket buffer

logger = logging.getLogger(__name__)


class Publisher(User):
    """Publishes stamped messages with CONFIRM at its share of the offered rate; each round trip is one PUSH request.

    A request is ``--batch N`` messages (one stamp: one publish time), or
    one message without it, packed into tagged PUSH datagrams of the
    process's :class:`PushChannel` and confirmed together.
    """

    load: ProcessRun

    def on_start(self) -> None:
        settings = self.load.settings
        self.batch = settings.batch
        self.request_name = f"publish x{self.batch}" if self.batch else "publish"
        self.channel = PushChannel.of_process(settings.backbone, settings.timeout, self.environment,
                                              self.request_name)
        self.in_flight: int | None = None
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
        self.channel.wait(self.in_flight)  # one request in flight per user: its previous one has finished
        elapsed = run.elapsed()
        if not self.pacer.take(elapsed, self._rate(elapsed)):
            return
        phase = run.schedule.index_at(elapsed)  # now: while publishing, a truncation may replace the schedule
        if phase is None:  # the run ended (or was cut short) since the pacer gave its token
            return
        payload = stamp(time.time_ns(), run.settings.size)
        self.in_flight = self.channel.publish([payload] * max(self.batch, 1), phase)


def send(sock: socket.socket, datagram: bytes, target: tuple[str, int]) -> bool:
    """Whether ``datagram`` went out on the non-blocking ``sock``: a full send buffer is waited for once."""
    try:
        sock.sendto(datagram, target)
        return True
    except BlockingIOError:
        pass
    except OSError:
        return False
    try:
        wait_write(sock.fileno(), SEND_WAIT)
        sock.sendto(datagram, target)
        return True
    except OSError:  # TimeoutError included
        return False


def report_push(environment: Environment, name: str, phase: int, response_ms: float, error: Exception | None,
                size: int, messages: int) -> None:
    """A finished publish request, to Locust's statistics and to the run's tally."""
    environment.events.request.fire(request_type=PUSH, name=name, response_time=response_ms, response_length=size,
                                    exception=error, context={})
    Publisher.load.count_push(phase, response_ms, error is not None, messages)


@dataclass
class Request:
    """A batch in flight: what its report needs, and the user waiting for it to finish, if one is."""

    phase: int
    messages: int
    size: int  # bytes, of all the messages
    started: float  # perf_counter seconds
    finished: gevent.event.Event | None = None


class PushChannel:
    """The Locust process's one socket and :class:`ConfirmedPublisher`, driven by one greenlet.

    The greenlet reports each request when its last CONFIRM comes (or its
    timeout passes): a publishing user goes on to pace its next request at
    once and waits only if that one is due before the previous has finished,
    so a request costs the user one wake-up (its pacing), not two.
    """

    _process: PushChannel | None = None

    @classmethod
    def of_process(cls, backbone: str, timeout: float, environment: Environment, name: str) -> PushChannel:
        if cls._process is None:
            cls._process = cls(parse_hostport(backbone), timeout, environment, name)
        return cls._process

    def __init__(self, backbone: tuple[str, int], timeout: float, environment: Environment, name: str) -> None:
        self.backbone = backbone
        self.environment = environment
        self.name = name
        self.publisher = ConfirmedPublisher(backbone, timeout=timeout)
        self.sock = open_socket(backbone, receive_buffer=RECEIVE_BUFFER, send_buffer=True)
        self.sock.setblocking(False)  # a stdlib socket, waited for in gevent's hub (the receive loop, wait_write)
        self._requests: dict[int, Request] = {}
        # reads CONFIRMs until the socket is empty, and only then waits in the hub (or for the publisher's timers)
        self._loop = ReceiveLoop(self.sock, next_deadline=self.publisher.next_deadline,
                                 handle_timers=self._handle_timers, datagram=self._datagram,
                                 stats=self.publisher.stats, backbone=backbone, style=gevent_style(),
                                 limit=READ_ROUND, longest=0.05)
        self._pump = gevent.spawn(self._loop.run, lambda: True)
        await_ack(gevent_style().until(lambda: self.publisher.acked), backbone, UNREACHABLE_AFTER, give_up=self._stop)

    def _stop(self) -> None:
        self._pump.kill()
        self._loop.close()
        self.sock.close()

    def publish(self, payloads: list[bytes], phase: int) -> int:
        """Send ``payloads`` as one batch, published in ``phase``; its number, to :meth:`wait` for."""
        started = time.perf_counter()
        number, datagrams = self.publisher.publish(payloads, time.monotonic())
        self._requests[number] = Request(phase, len(payloads), len(payloads[0]) * len(payloads), started)
        for datagram in datagrams:
            self._send(datagram)
        return number

    def wait(self, number: int | None) -> None:
        """Until batch ``number`` has been reported (at once if it has been, or for None)."""
        if number is None:
            return
        request = self._requests.get(number)
        if request is None:
            return
        request.finished = gevent.event.Event()
        # the pump finishes every batch by its timeout (it wakes at least every 50 ms); waiting longer
        # than that means the pump is gone, and the batch counts as not confirmed rather than hanging the user
        if not request.finished.wait(self.publisher.timeout + 1.0):
            self._report(number, False)

    def _send(self, datagram: bytes) -> None:
        if not send(self.sock, datagram, self.backbone):
            self.publisher.stats["send errors"] += 1  # the retry sends it again

    def _handle_timers(self, now: float) -> None:
        sends, finished = self.publisher.handle_timers(now)
        for datagram in sends:
            self._send(datagram)
        self._resolve(finished)

    def _datagram(self, data: bytes, source: tuple[str, int], now: float, from_group: bool) -> None:
        self._resolve(self.publisher.receive(data, source, now))

    def _resolve(self, finished: list[Finished]) -> None:
        for batch in finished:
            self._report(batch.batch, batch.confirmed)

    def _report(self, number: int, confirmed: bool) -> None:
        request = self._requests.pop(number, None)
        if request is None:
            return
        response_ms = (time.perf_counter() - request.started) * 1000
        error = None if confirmed else PublishTimeout(
            f"{request.messages} messages not all confirmed within {self.publisher.timeout:g} s")
        report_push(self.environment, self.name, request.phase, response_ms, error, request.size, request.messages)
        if request.finished is not None:
            request.finished.set()


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
        self.measuring = MeasuringSubscriber(self.backbone, DeliveryAccount(self.load.phase_of_ns),
                                         give_up_after=max(settings.drain, 0.5))
        self.sock = open_socket(self.backbone, receive_buffer=RECEIVE_BUFFER)
        self.sock.setblocking(False)  # a stdlib socket, waited for in gevent's hub (the receive loop, wait_write)
        self.sock_address = self.sock.getsockname()
        self.forwards: gevent.queue.Queue = gevent.queue.Queue(maxsize=1024)
        self.forwarder = gevent.spawn(self._serve_forwards)
        self.released: list[Delivery | Lost] = []  # since the last report
        # reads until the socket is empty, then reports what the datagrams released in one go and waits in the
        # hub (or for the subscriber's timers): a wake-up, not each datagram, costs a greenlet switch and an event
        self._loop = ReceiveLoop(self.sock, next_deadline=self.measuring.next_deadline,
                                 handle_timers=self._handle_timers, datagram=self._datagram,
                                 stats=self.measuring.stats, backbone=self.backbone, style=gevent_style(),
                                 limit=READ_ROUND, longest=PUMP_SLICE, idle=self._report_released)
        # on_stop: Locust calls it only for users that started
        await_ack(self._pump_until_acked, self.backbone, UNREACHABLE_AFTER, give_up=self.on_stop)
        self.load.subscribers.append(self)

    def _pump_until_acked(self, timeout: float) -> bool:
        self._pump(time.monotonic() + timeout, until_acked=True)
        return self.measuring.acked

    @task
    def receive(self) -> None:
        self._pump(time.monotonic() + PUMP_SLICE)

    def _pump(self, until: float, until_acked: bool = False) -> None:
        """Receive and run the timers until ``until`` (or the first KEEPALIVE-ACK, with ``until_acked``)."""
        measuring = self.measuring
        self._loop.run(lambda: time.monotonic() < until and not (until_acked and measuring.acked), until)
        self._report_released()

    def _handle_timers(self, now: float) -> None:
        sends, events = self.measuring.handle_timers(now)
        for datagram in sends:
            self._send(datagram, self.backbone)
        self.released += self.measuring.release(events, time.time_ns())

    def _datagram(self, data: bytes, source: tuple[str, int], now: float, from_group: bool) -> None:
        measuring = self.measuring
        arrived, forward = measuring.receive(data, source, now)
        if arrived:
            self.released += measuring.release(arrived, time.time_ns())
            if len(self.released) >= REPORT_EVERY:
                self._report_released()
        if forward is not None:
            if self.forwards.full():
                measuring.stats["forwards dropped"] += 1
                measuring.forward_done(forward)
            else:
                self.forwards.put_nowait(forward)

    def _report_released(self) -> None:
        released, self.released = self.released, []
        self._report(released)

    def _report(self, released: list[Delivery | Lost]) -> None:
        """What the subscriber released (each message's latency is in the tally already), to Locust: one DELIVER
        per message, or with ``--batch`` one per name for all the runs of messages released since the last
        report (the statistics' own cost is per request)."""
        fire = self.environment.events.request.fire
        batched = self.load.settings.batch > 0
        run: dict[str, list[float]] = {}  # name -> [latency of its first message, bytes]
        for item in released:
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
        bucket = forward_bucket(FORWARD_RATE)
        style = gevent_style()
        while True:
            forward = self.forwards.get()
            answer_forward(forward, self.measuring.held, bucket, self._send_to, self.measuring.stats, style=style)
            self.measuring.forward_done(forward)

    def _send_to(self, datagram: bytes, target: tuple[str, int]) -> bool:
        return send(self.sock, datagram, target)

    def _send(self, datagram: bytes, target: tuple[str, int]) -> None:
        if not send(self.sock, datagram, target):
            self.measuring.stats["send errors"] += 1

    def finish(self) -> None:
        self._report(self.measuring.release(self.measuring.finish(time.monotonic()), time.time_ns()))

    def snapshot(self) -> RunTally:
        return self.measuring.snapshot()

    def on_stop(self) -> None:
        self.forwarder.kill()
        self._loop.close()
        self.sock.close()
        if self.measuring.stats:  # REQUESTs sent, datagrams dropped and why: in locust.log
            logger.info("subscriber %s:%d: %s", *self.sock_address, dict(self.measuring.stats))
