"""The one receive-and-timer loop, in both I/O styles, over real loopback sockets: datagrams in order, timers at
their deadline, receive errors counted, the group left once with its notice, a reader pumping between."""
from __future__ import annotations

import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import gevent
import gevent.event
import pytest

from fyrehose.drivers.backbone_io import gevent_style
from fyrehose.drivers.receive_loop import ReceiveLoop
from fyrehose.protocol.multicast import fallback_notice

BACKBONE = ("127.0.0.1", 9)
GROUP = ("239.1.2.3", 4000)
TIMEOUT = 30.0  # generous upper bound of every wait for an event


def udp() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    return sock


class Recorded:
    """A driver's part: what it was handed, its deadline (set by the test), and when its timers ran."""

    def __init__(self, deadline: float = float("inf")) -> None:
        self.datagrams: list[tuple[bytes, bool]] = []
        self.timers: list[float] = []
        self.deadline = deadline
        self.arrived = threading.Event()
        self.expect = 0
        self.on_datagram: Callable[[bytes], None] = lambda data: None

    def next_deadline(self) -> float:
        return self.deadline

    def handle_timers(self, now: float) -> None:
        self.timers.append(now)
        self.deadline = float("inf")

    def datagram(self, data: bytes, source, now: float, from_group: bool) -> None:
        self.datagrams.append((data, from_group))
        self.on_datagram(data)
        if len(self.datagrams) >= self.expect:
            self.arrived.set()


def loop_for(sock: socket.socket, recorded: Recorded, stats: Counter, **options) -> ReceiveLoop:
    return ReceiveLoop(sock, next_deadline=recorded.next_deadline, handle_timers=recorded.handle_timers,
                       datagram=recorded.datagram, stats=stats, backbone=BACKBONE, **options)


def test_a_thread_takes_every_datagram_in_order_and_runs_the_timers_once_they_are_due():
    sock, sender = udp(), udp()
    recorded, stats = Recorded(deadline=0.0), Counter()
    recorded.expect = 200
    loop = loop_for(sock, recorded, stats, limit=8)
    stop = threading.Event()
    thread = threading.Thread(target=loop.run, args=(lambda: not stop.is_set(),), daemon=True)
    thread.start()
    try:
        for n in range(200):
            sender.sendto(b"%d" % n, sock.getsockname())
        assert recorded.arrived.wait(TIMEOUT)
    finally:
        stop.set()
        thread.join(TIMEOUT)
        loop.close()
        sock.close()
        sender.close()
    assert [data for data, _ in recorded.datagrams] == [b"%d" % n for n in range(200)]
    assert len(recorded.timers) == 1  # due at once, then never again (the deadline is infinite after)
    assert not thread.is_alive() and stats == Counter()


def test_run_ends_at_until_and_calls_idle_whenever_the_sockets_are_empty():
    sock = udp()
    recorded, idle = Recorded(), []
    loop = loop_for(sock, recorded, Counter(), longest=0.01, idle=lambda: idle.append(True))
    loop.run(lambda: True, until=time.monotonic() + 0.05)
    loop.close()
    sock.close()
    assert idle and recorded.datagrams == []


class FailingOnce:
    """A socket whose first read fails (as an ICMP error does) and whose later reads find nothing."""

    def __init__(self) -> None:
        self.reads = 0

    def recvfrom(self, size: int):
        self.reads += 1
        if self.reads == 1:
            raise ConnectionRefusedError("port unreachable")
        raise BlockingIOError


def test_a_failed_read_is_counted_as_a_receive_error_and_reading_goes_on():
    sock = udp()
    recorded, stats = Recorded(), Counter()
    loop = loop_for(sock, recorded, stats)
    loop.sock.close()
    loop.sock = FailingOnce()  # type: ignore[assignment]
    assert loop._read(8) == 0  # no datagram: the loop waits rather than reading on in a spin
    assert stats == Counter({"receive errors": 1}) and loop.sock.reads == 2
    sock.close()


def test_the_group_is_read_too_and_left_once_with_the_notice(capfd):
    sock, group, sender = udp(), udp(), udp()
    recorded, stats = Recorded(), Counter()
    loop = loop_for(sock, recorded, stats, group=group, group_address=GROUP)
    recorded.on_datagram = lambda data: loop.leave_group() if data == b"silent" else None
    sender.sendto(b"unicast", sock.getsockname())
    sender.sendto(b"grouped", group.getsockname())
    sender.sendto(b"silent", group.getsockname())
    sender.sendto(b"never read", group.getsockname())
    recorded.expect = 3
    stop = threading.Event()
    thread = threading.Thread(target=loop.run, args=(lambda: not stop.is_set(),), daemon=True)
    thread.start()
    try:
        assert recorded.arrived.wait(TIMEOUT)
        loop.leave_group()  # a second time: nothing more to do or say
    finally:
        stop.set()
        thread.join(TIMEOUT)
        loop.close()
        sock.close()
        sender.close()
    assert recorded.datagrams == [(b"unicast", False), (b"grouped", True), (b"silent", True)]
    assert group.fileno() == -1 and loop.group is None
    assert capfd.readouterr().err.splitlines() == [fallback_notice(GROUP, BACKBONE)]


def test_a_reader_pumps_between_rounds_under_the_guard_and_runs_due_timers():
    sock, sender = udp(), udp()
    recorded = Recorded(deadline=0.0)
    guard = threading.Lock()
    loop = loop_for(sock, recorded, Counter(), guard=guard)
    for n in range(3):
        sender.sendto(b"%d" % n, sock.getsockname())
    for _ in range(100):  # bounded: loopback datagrams are queued by the time sendto returns
        loop.pump()
        if len(recorded.datagrams) == 3:
            break
    assert [data for data, _ in recorded.datagrams] == [b"0", b"1", b"2"] and len(recorded.timers) == 1
    with guard:  # held by another reader: a pump waits for it rather than reading out of order
        pumping = threading.Thread(target=loop.pump, daemon=True)
        pumping.start()
        pumping.join(0.05)
        assert pumping.is_alive()
    pumping.join(TIMEOUT)
    loop.close()
    sock.close()
    sender.close()


@pytest.mark.parametrize("limit", [1, 16])
def test_a_greenlet_takes_every_datagram_and_lets_the_others_run_between_busy_rounds(limit):
    style = gevent_style()
    sock, sender = udp(), udp()
    recorded, stats = Recorded(deadline=0.0), Counter()
    recorded.expect = 100
    for n in range(100):
        sender.sendto(b"%d" % n, sock.getsockname())
    loop = loop_for(sock, recorded, stats, style=style, limit=limit)
    others = []
    running = True
    reader = gevent.spawn(loop.run, lambda: running)
    ticker = gevent.spawn(lambda: [others.append(len(recorded.datagrams)) or gevent.sleep(0) for _ in range(50)])
    with gevent.Timeout(TIMEOUT):
        while not recorded.arrived.is_set():
            gevent.sleep(0.001)
    running = False
    reader.join(TIMEOUT)
    ticker.join(TIMEOUT)
    loop.close()
    sock.close()
    sender.close()
    assert [data for data, _ in recorded.datagrams] == [b"%d" % n for n in range(100)]
    assert reader.dead and len(recorded.timers) == 1
    assert any(0 < seen < 100 for seen in others)  # the ticker ran while the datagrams were being taken


@contextmanager
def followed(loop: ReceiveLoop, *sockets: socket.socket) -> Iterator[None]:
    """``loop`` followed by gevent's own loop for the block; then stopped, closed, and ``sockets`` closed."""
    running = True
    loop.follow(lambda: running, "test receive")
    try:
        yield
    finally:
        running = False
        loop.close()
        for sock in sockets:
            sock.close()


class Ticker:
    """Another greenlet: counts its turns until every expected datagram arrived (when did the others run?)."""

    def __init__(self, recorded: Recorded) -> None:
        self.recorded = recorded
        self.ticks = 0

    def run(self) -> None:
        while not self.recorded.arrived.is_set():
            self.ticks += 1
            gevent.sleep(0)


@pytest.mark.parametrize("limit", [1, 16])
def test_the_loop_followed_takes_every_datagram_in_its_own_callbacks_and_lets_the_others_run(limit):
    sock, sender = udp(), udp()
    recorded, stats = Recorded(deadline=0.0), Counter()
    recorded.expect = 100
    ticker = Ticker(recorded)
    handlers: set[object] = set()
    seen: list[int] = []  # the ticks counted when each datagram was handed over

    def handed(data: bytes) -> None:
        handlers.add(gevent.getcurrent())
        seen.append(ticker.ticks)

    recorded.on_datagram = handed
    for n in range(100):
        sender.sendto(b"%d" % n, sock.getsockname())
    loop = loop_for(sock, recorded, stats, style=gevent_style(), limit=limit)
    with followed(loop, sock, sender), gevent.Timeout(TIMEOUT):
        gevent.spawn(ticker.run).join()
    assert [data for data, _ in recorded.datagrams] == [b"%d" % n for n in range(100)]
    assert handlers == {gevent.get_hub()}  # read by the loop itself: no greenlet switched to for a datagram
    assert len(recorded.timers) == 1 and stats == Counter()
    assert seen[-1] > seen[0]  # the ticker ran between the rounds: a full round reads on after the others


def test_the_loop_followed_runs_the_timers_at_their_deadline_without_a_datagram_and_stops_when_told():
    sock = udp()
    recorded = Recorded(deadline=0.0)
    fired = gevent.event.Event()

    def handle_timers(now: float) -> None:
        recorded.timers.append(now)
        recorded.deadline = now + 0.05 if len(recorded.timers) < 3 else float("inf")
        if len(recorded.timers) == 3:
            fired.set()

    recorded.handle_timers = handle_timers  # type: ignore[method-assign]
    loop = loop_for(sock, recorded, Counter(), style=gevent_style(), longest=0.01)
    running = True
    loop.follow(lambda: running, "test receive")
    try:
        assert fired.wait(TIMEOUT)
        assert all(later - earlier >= 0.05 for earlier, later in zip(recorded.timers, recorded.timers[1:]))
        running = False
        sender = udp()
        sender.sendto(b"after", sock.getsockname())  # wakes the loop, which finds it is to stop
        sender.close()
        with gevent.Timeout(TIMEOUT):
            while loop._watching is not None:
                gevent.sleep(0.001)
        assert recorded.datagrams == []  # nothing read once running() said no
    finally:
        loop.close()
        sock.close()


def test_the_group_is_left_while_followed_and_read_no_more(capfd):
    sock, group, sender = udp(), udp(), udp()
    recorded, stats = Recorded(), Counter()
    loop = loop_for(sock, recorded, stats, group=group, group_address=GROUP, style=gevent_style())
    recorded.on_datagram = lambda data: loop.leave_group() if data == b"silent" else None
    sender.sendto(b"grouped", group.getsockname())
    sender.sendto(b"silent", group.getsockname())
    sender.sendto(b"never read", group.getsockname())
    recorded.expect = 3
    with followed(loop, sock, sender):
        with gevent.Timeout(TIMEOUT):
            while len(recorded.datagrams) < 2:
                gevent.sleep(0.001)
        sender.sendto(b"unicast", sock.getsockname())
        with gevent.Timeout(TIMEOUT):
            while not recorded.arrived.is_set():
                gevent.sleep(0.001)
    assert recorded.datagrams == [(b"grouped", True), (b"silent", True), (b"unicast", False)]
    assert group.fileno() == -1 and stats == Counter()
    assert capfd.readouterr().err.splitlines() == [fallback_notice(GROUP, BACKBONE)]


def test_a_style_without_an_event_loop_cannot_be_followed():
    sock = udp()
    loop = loop_for(sock, Recorded(), Counter())
    with pytest.raises(ValueError, match="threads style has no event loop"):
        loop.follow(lambda: True, "test receive")
    loop.close()
    sock.close()


def test_a_handler_that_ends_the_round_lets_the_others_run_before_the_next_datagram():
    sock, sender = udp(), udp()
    recorded, stats = Recorded(), Counter()
    recorded.expect = 6
    ticker = Ticker(recorded)
    seen: list[int] = []
    loop = loop_for(sock, recorded, stats, style=gevent_style(), limit=64)

    def handed(data: bytes) -> None:
        seen.append(ticker.ticks)
        loop.end_round()  # a long piece of work done in the loop's callback

    recorded.on_datagram = handed
    with followed(loop, sock, sender), gevent.Timeout(TIMEOUT):
        while not recorded.timers:  # the first round (its timer) is over: the rounds now come from the socket
            gevent.sleep(0.001)
        for n in range(6):
            sender.sendto(b"%d" % n, sock.getsockname())
        gevent.spawn(ticker.run).join()
    assert [data for data, _ in recorded.datagrams] == [b"%d" % n for n in range(6)]
    assert all(later > earlier for earlier, later in zip(seen, seen[1:]))  # one datagram per round, then the ticker
