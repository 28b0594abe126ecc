"""The I/O every driver of :class:`~fyrehose.protocol.connection.BackboneConnection` does around it, written once.

The threaded :class:`fyrehose.Client`, the gateways' gevent link
(:mod:`fyrehose.drivers.link`), the journal's receive loop
(:mod:`fyrehose.journal.recorder`), the load test's Locust users
(:mod:`fyrehose.loadtest.users`) and the bench's load generators
(:mod:`fyrehose.tools.bench.loadgen`) all open a UDP socket towards the
backbone, wait for its first KEEPALIVE-ACK, time their receive waits by the
connection's next deadline, answer FORWARDs at a paced rate, stamp the
subject layer's messages with the wall clock and say goodbye when they stop;
the start-up probe (:func:`keepalive_answered`, :func:`wait_for_backbone`)
asks a backbone for one ACK.  What differs between them is how they wait,
their :class:`IoStyle`: :data:`THREADS` (``time.sleep``, ``threading.Event``,
stdlib sockets; cooperative under gevent's monkey patching, since they are
looked up when called) or :func:`gevent_style` (``gevent.sleep``, gevent's
events, sockets and select, with nothing patched; and :class:`LoopWatch`, the
loop's own watchers that run a receive loop's rounds without a greenlet).  The rest is here, once;
the receive-and-timer loop itself is :mod:`fyrehose.drivers.receive_loop`.

The constants of the client side live where they are decided: the
keepalive interval in :mod:`fyrehose.protocol.connection`, the pace of
re-DELIVERs in :mod:`fyrehose.protocol.forwarding`; the socket sizes and
waits of the drivers here.
"""
from __future__ import annotations

import select
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any, Protocol
from weakref import WeakKeyDictionary

from fyrehose.errors import BackboneUnreachable
from fyrehose.net.addresses import resolve_ipv4, route_source
from fyrehose.net.sockets import enlarge_buffers
from fyrehose.protocol import codec
from fyrehose.protocol.codec import Address
from fyrehose.protocol.connection import BackboneConnection, ConnectionOptions
from fyrehose.protocol.forwarding import FORWARD_BURST, MessageStore, Paced, deliveries
from fyrehose.protocol.pacing import TokenBucket

RECEIVE_BUFFER = 8 << 20  # a second of a fast stream: what arrives while the driver is busy waits here
UNREACHABLE_AFTER = 5.0  # seconds without a KEEPALIVE-ACK (the first one included) before the backbone is unreachable
SHORTEST_WAIT = 0.001  # a receive loop's least wait for a datagram: a timer already due is no busy loop
PROBE_INTERVAL = 0.1  # seconds between the start-up probe's KEEPALIVEs
_PROBE_FLAGS = codec.FLAG_NOSUBSCRIBE | codec.FLAG_NOJOURNAL  # a probe neither subscribes nor asks the journal


class Waitable(Protocol):
    """What an :class:`IoStyle` makes for one greenlet or thread to wake another: threading's or gevent's Event."""

    def set(self) -> None: ...

    def is_set(self) -> bool: ...

    def wait(self, timeout: float | None = None) -> bool: ...


@dataclass(frozen=True)
class IoStyle:
    """How a driver waits: its sleep, its events, the UDP sockets it blocks on, its wait for sockets to read
    (``readable(sockets, timeout)``: those of them with a datagram waiting) and what it does between two busy
    rounds of reading (``pause``: let the loop's other greenlets run, or nothing for a thread); a style with an
    event loop also has ``watch(sockets, ready)``, which has the loop call ``ready()`` itself (a
    :class:`LoopWatch`), with no thread or greenlet waiting."""

    name: str
    sleep: Callable[[float], object]
    event: Callable[[], Waitable]
    udp_socket: Callable[[], socket.socket]
    readable: Callable[[list[socket.socket], float], list[socket.socket]]
    pause: Callable[[], object]
    watch: Callable[[list[socket.socket], Callable[[], None]], LoopWatch] | None = None

    def until(self, condition: Callable[[], bool], every: float = 0.01) -> Callable[[float], bool]:
        """A wait for ``condition`` (asked every ``every`` s) of at most the seconds it is given; whether it held."""
        def wait(timeout: float) -> bool:
            deadline = time.monotonic() + timeout
            while not condition():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.sleep(min(every, left))
            return True
        return wait


def _sleep(seconds: float) -> None:
    time.sleep(seconds)  # looked up now: gevent's once the process is monkey-patched


def _readable(sockets: list[socket.socket], timeout: float) -> list[socket.socket]:
    return select.select(sockets, [], [], timeout)[0]  # looked up now, as time.sleep is


def _pause() -> None:
    """Between two busy rounds: hand the interpreter to the process's other threads (a reader iterating what the
    receive thread queued) at once, as a wait would, instead of after a switch interval."""
    time.sleep(0)


THREADS = IoStyle("threads", _sleep, lambda: threading.Event(),
                  lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM), _readable, _pause)


@cache
def gevent_style() -> IoStyle:
    """gevent's waits on its loop, nothing monkey-patched (imported on first use: the Client needs no gevent)."""
    import gevent
    import gevent.event
    import gevent.hub
    import gevent.socket

    watchers: WeakKeyDictionary[socket.socket, Any] = WeakKeyDictionary()  # one loop watcher per socket, kept

    def readable(sockets: list[socket.socket], timeout: float) -> list[socket.socket]:
        """The first of ``sockets`` to turn readable, or none after ``timeout``: a kept watcher per socket started for
        the wait (gevent.select.select makes and drops them every call, and selects once first: twice the CPU)."""
        loop = gevent.get_hub().loop
        waiter: gevent.hub.Waiter = gevent.hub.Waiter()
        started = []
        try:
            for sock in sockets:
                fileno = sock.fileno()
                if fileno < 0:
                    raise ValueError("waiting on a closed socket")
                watcher = watchers.get(sock)
                if watcher is None or watcher.fd != fileno:
                    watcher = watchers[sock] = loop.io(fileno, 1)
                watcher.start(waiter.switch, sock)
                started.append(watcher)
            timer = loop.timer(timeout)
            timer.start(waiter.switch, None)
            try:
                ready = waiter.get()
            finally:
                timer.close()
        finally:
            for watcher in started:
                watcher.stop()
        return [] if ready is None else [ready]

    def watch(sockets: list[socket.socket], ready: Callable[[], None]) -> LoopWatch:
        return LoopWatch(gevent.get_hub().loop, sockets, ready)

    return IoStyle("gevent", gevent.sleep, gevent.event.Event,
                   lambda: gevent.socket.socket(socket.AF_INET, socket.SOCK_DGRAM), readable, gevent.sleep, watch)


class LoopWatch:
    """An event loop (gevent's hub's) calling ``ready()`` from its own iteration whenever one of ``sockets`` is
    readable, and once more at the time :meth:`wake_in` last asked for.

    What a waiting client's reply costs through a gateway is mostly wake-ups: a greenlet blocked in
    ``readable`` is switched to from the hub and back for every datagram, and makes a waiter and a timer for
    every wait.  Watched, the datagram is read in the hub's callback, and the timer is only re-armed when the
    time asked for comes sooner than the armed one.  ``ready`` must not wait (it runs in the hub).
    """

    def __init__(self, loop: Any, sockets: list[socket.socket], ready: Callable[[], None]) -> None:
        self.loop = loop
        self.ready = ready
        self.watchers: dict[socket.socket, Any] = {}
        for sock in sockets:
            watcher = self.watchers[sock] = loop.io(sock.fileno(), 1)
            watcher.start(self._once)
        self.timer: Any = None
        self.due = float("inf")  # when the armed timer fires (monotonic)
        self._iteration: int | None = None  # the loop iteration that called ready() last

    def _once(self) -> None:
        """``ready()``, at most once per loop iteration: the timer and a socket (or two sockets) may fire in the
        same one, and a round that ended early (a full round, an ended one) must let the loop's other callbacks
        run before the next.  A socket still readable fires again in the next iteration (level-triggered)."""
        iteration = self.loop.iteration
        if iteration == self._iteration:
            return
        self._iteration = iteration
        self.ready()

    def wake_in(self, seconds: float) -> None:
        """Have ``ready()`` called after ``seconds`` at the latest (an earlier time already armed stands)."""
        due = time.monotonic() + seconds
        timer = self.timer
        if timer is not None:
            if timer.active and self.due <= due:
                return
            timer.stop()
            timer.close()
        self.timer = timer = self.loop.timer(seconds)
        self.due = due
        timer.start(self._once)

    def drop(self, sock: socket.socket) -> None:
        """Watch ``sock`` no more (before it is closed)."""
        watcher = self.watchers.pop(sock, None)
        if watcher is not None:
            watcher.stop()
            watcher.close()

    def stop(self) -> None:
        """Call ``ready()`` no more: every watcher stopped and closed (idempotent)."""
        for sock in list(self.watchers):
            self.drop(sock)
        timer, self.timer = self.timer, None
        if timer is not None:
            timer.stop()
            timer.close()


# ---------------------------------------------------------------- the socket


def open_socket(backbone: Address, *, bind: Address | None = None, receive_buffer: int = RECEIVE_BUFFER,
                send_buffer: bool = False, style: IoStyle = THREADS) -> socket.socket:
    """A UDP socket of ``style`` to talk to ``backbone`` from, with a ``receive_buffer``-byte kernel buffer (and a
    send buffer of the same size with ``send_buffer``), bound to ``bind`` or else to the local address that routes
    to the backbone, on a port the kernel picks: the source the backbone sees and names in FORWARDs, reachable
    only where the backbone is."""
    sock = style.udp_socket()
    try:
        enlarge_buffers(sock, receive_buffer,
                        (socket.SO_RCVBUF, socket.SO_SNDBUF) if send_buffer else (socket.SO_RCVBUF,))
        sock.bind(bind if bind is not None else (route_source(backbone), 0))
    except OSError:
        sock.close()
        raise
    return sock


def say_goodbye(sock: socket.socket, connection: BackboneConnection) -> None:
    """Send the connection's goodbye (NOSUBSCRIBE, NOJOURNAL): the backbone stops sending to this client now rather
    than after its 5 s lifetime.  A socket that cannot send any more has nothing to stop."""
    try:
        sock.sendto(connection.goodbye(), connection.backbone)
    except OSError:
        pass


def sent(sock: socket.socket, datagram: bytes, target: Address) -> bool:
    """Whether ``datagram`` went out to ``target`` (a full send buffer, a closed socket: it did not)."""
    try:
        sock.sendto(datagram, target)
    except OSError:
        return False
    return True


# ---------------------------------------------------------------- time


def wall_us() -> int:
    """Wall-clock microseconds: the time heartbeats and the trust exchange carry."""
    return time.time_ns() // 1000


def timer_wait(deadline: float, now: float, longest: float) -> float:
    """How long a receive loop may wait for a datagram at ``now`` before the connection's timers are due at
    ``deadline``: at least :data:`SHORTEST_WAIT`, at most ``longest`` (so it notices being closed)."""
    return min(max(deadline - now, SHORTEST_WAIT), longest)


# ---------------------------------------------------------------- the first ACK


def unreachable(backbone: Address, waited: float) -> BackboneUnreachable:
    host, port = backbone
    return BackboneUnreachable(f"no KEEPALIVE-ACK from {host}:{port} within {waited:g} s")


def await_ack(wait: Callable[[float], bool], backbone: Address, timeout: float = UNREACHABLE_AFTER, *,
              give_up: Callable[[], object] | None = None) -> None:
    """Wait (``wait(timeout)``: an event the driver's receive loop sets on the first KEEPALIVE-ACK, or
    :meth:`IoStyle.until` a condition) until the backbone has answered; else ``give_up()`` (close what was
    opened) and raise :class:`~fyrehose.errors.BackboneUnreachable`."""
    if not wait(timeout):
        if give_up is not None:
            give_up()
        raise unreachable(backbone, timeout)


def keepalive_handshake(sock: socket.socket, connection: BackboneConnection, timeout: float, *,
                        every: float = PROBE_INTERVAL, style: IoStyle = THREADS) -> bool:
    """Send the connection's KEEPALIVE from the blocking ``sock`` every ``every`` s until a KEEPALIVE-ACK to one of
    its tokens arrives (True) or ``timeout`` passes (False); for a driver with no receive loop running yet.

    Every datagram read meanwhile goes through the connection, which judges the answer (only the backbone's
    address, only our tokens).  An ICMP error (nobody listens yet) ends an attempt early; the next one waits its
    turn.  The socket is left with a timeout set.
    """
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        ends = time.monotonic() + min(every, left)
        try:
            now = time.monotonic()
            for datagram in connection.handle_timers(max(now, connection.next_deadline()))[0]:
                sock.sendto(datagram, connection.backbone)
            while (wait := ends - time.monotonic()) > 0:
                sock.settimeout(wait)
                data, source = sock.recvfrom(codec.MAX_DATAGRAM)
                now = time.monotonic()
                if connection.receive(data, source, now).acked:
                    return True
                if now >= connection.next_deadline():  # a validating backbone's COOKIE: echo it at once
                    for datagram in connection.handle_timers(now)[0]:
                        sock.sendto(datagram, connection.backbone)
        except (TimeoutError, ConnectionError):  # no answer in time (socket.timeout); an ICMP port unreachable
            pass
        if ends < deadline:  # another attempt follows: no busy loop when this one failed at once
            style.sleep(max(0.0, ends - time.monotonic()))
    return False


def _probe_connection(addr: Address) -> BackboneConnection:
    host, port = addr
    return BackboneConnection((resolve_ipv4(host), port), ConnectionOptions(flags=_PROBE_FLAGS,
                                                                             keepalive_interval=PROBE_INTERVAL))


def keepalive_answered(addr: Address, wait: float = PROBE_INTERVAL) -> bool:
    """Whether the backbone at ``addr`` answers one KEEPALIVE, sent from a fresh UDP socket, within ``wait`` s."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        return keepalive_handshake(sock, _probe_connection(addr), wait, every=wait)


def wait_for_backbone(addr: Address, timeout: float = 10.0) -> None:
    """Block until the backbone at ``addr`` answers a KEEPALIVE; ``TimeoutError`` after ``timeout`` seconds.

    Every attempt goes from one socket, so the backbone sees a single client
    (one slot of ``--max-clients``) however many attempts it takes, and an ACK
    to an earlier attempt's token that comes after it gave up still counts.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        if keepalive_handshake(sock, _probe_connection(addr), timeout):
            return
    host, port = addr
    raise TimeoutError(f"backbone at {host}:{port} did not answer within {timeout:g} s")


# ---------------------------------------------------------------- answering FORWARDs


def forward_bucket(rate: float) -> TokenBucket:
    """The token bucket that paces one driver's re-DELIVERs: ``rate`` messages/s, bursts of FORWARD_BURST."""
    return TokenBucket(rate, burst=FORWARD_BURST, now=time.monotonic())


def answer_forward(forward: codec.Forward, store: MessageStore, bucket: TokenBucket,
                   send: Callable[[bytes, Address], bool], stats: Counter[str], *, style: IoStyle = THREADS,
                   stopped: Callable[[], bool] = lambda: False) -> None:
    """Re-DELIVER what ``store`` holds of ``forward``'s range to its requester through ``send``, each datagram once
    ``bucket`` has a token for it (waiting with the style's sleep), counted as ``forwarded`` or ``send errors``;
    nothing more once ``stopped()`` (asked before each token and after each wait: the socket may be gone)."""
    target = (forward.addr, forward.port)
    pacing = Paced(deliveries(store, forward), bucket)
    while not stopped() and (wait := pacing.next_send(time.monotonic())) is not None:
        if wait > 0:
            style.sleep(wait)
            continue
        if send(pacing.take(), target):
            stats["forwarded"] += 1
        else:
            stats["send errors"] += 1
