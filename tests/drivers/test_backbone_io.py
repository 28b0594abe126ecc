"""fyrehose.drivers.backbone_io: the I/O every driver of BackboneConnection does, written once (the socket, the first
ACK, the goodbye, the wall clock, timer waits, paced answers to FORWARDs) and the backbone start-up probe."""
from __future__ import annotations

import socket
import threading
import time
from collections import Counter
from dataclasses import replace

import gevent
import gevent.socket
import pytest

from fyrehose.drivers import backbone_io
from fyrehose.drivers.backbone_io import (
    SHORTEST_WAIT,
    THREADS,
    answer_forward,
    await_ack,
    forward_bucket,
    gevent_style,
    keepalive_answered,
    keepalive_handshake,
    open_socket,
    say_goodbye,
    sent,
    timer_wait,
    unreachable,
    wait_for_backbone,
    wall_us,
)
from fyrehose.errors import BackboneUnreachable
from fyrehose.protocol import codec
from fyrehose.protocol.connection import BackboneConnection, ConnectionOptions
from fyrehose.protocol.forwarding import FORWARD_BURST
from fyrehose.protocol.pacing import TokenBucket
from fyrehose.protocol.recent_messages import RecentMessages
from fyrehose.runtime.readiness import LOOPBACK, free_port

from support import EVENT_WITHIN


@pytest.fixture
def peer():
    """A UDP socket on loopback standing in for the backbone."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind((LOOPBACK, 0))
        sock.settimeout(2.0)
        yield sock


def counted_tokens():
    tokens = iter(range(1, 1 << 20))
    return lambda size: next(tokens).to_bytes(size, "big")


# ---------------------------------------------------------------- time


def test_wall_us_is_the_wall_clock_in_microseconds():
    before = time.time_ns() // 1000
    now = wall_us()
    assert before <= now <= time.time_ns() // 1000


@pytest.mark.parametrize("deadline, longest, expected", [
    (10.5, 0.1, 0.1),  # far off: as long as the loop may
    (10.05, 0.1, 0.05),  # soon: until then
    (9.0, 0.1, SHORTEST_WAIT),  # overdue: a short wait, never a busy loop
    (10.5, 0.0005, 0.0005),  # the loop's own end comes first
])
def test_timer_wait_waits_for_the_deadline_within_bounds(deadline, longest, expected):
    assert timer_wait(deadline, 10.0, longest) == pytest.approx(expected)


# ---------------------------------------------------------------- styles


def test_the_thread_style_looks_its_waits_up_when_called(monkeypatch):
    """Under gevent's monkey patching, applied before or after the import, the threads' waits are gevent's."""
    slept = []
    monkeypatch.setattr(time, "sleep", slept.append)
    THREADS.sleep(0.25)
    assert slept == [0.25]
    made = []
    monkeypatch.setattr(threading, "Event", lambda: made.append(1) or "event")
    assert THREADS.event() == "event" and made == [1]
    sock = THREADS.udp_socket()
    try:
        assert type(sock) is socket.socket and sock.type == socket.SOCK_DGRAM
    finally:
        sock.close()


def test_the_gevent_style_is_gevents_own_and_made_once():
    style = gevent_style()
    assert style is gevent_style() and style.name == "gevent" and style.sleep is gevent.sleep
    sock = style.udp_socket()
    try:
        assert isinstance(sock, gevent.socket.socket)
    finally:
        sock.close()
    assert not style.event().is_set()


def test_until_waits_for_a_condition_with_the_styles_sleep():
    slept = []
    style = replace(THREADS, name="test", sleep=slept.append)
    answers = iter([False, False, True])
    assert style.until(lambda: next(answers), every=0.01)(5.0)
    assert slept == [0.01, 0.01]
    assert not THREADS.until(lambda: False, every=0.01)(0.03)


# ---------------------------------------------------------------- the first ACK


def test_await_ack_returns_once_acked_and_else_gives_up_and_raises():
    given_up = []
    await_ack(lambda timeout: True, ("10.0.0.1", 2323), 1.0, give_up=lambda: given_up.append(1))
    assert given_up == []
    with pytest.raises(BackboneUnreachable, match=r"no KEEPALIVE-ACK from 10.0.0.1:2323 within 0.5 s"):
        await_ack(lambda timeout: False, ("10.0.0.1", 2323), 0.5,
                  give_up=lambda: given_up.append(1))
    assert given_up == [1]
    assert str(unreachable(("127.0.0.1", 9), 2.0)) == "no KEEPALIVE-ACK from 127.0.0.1:9 within 2 s"


def test_keepalive_handshake_sends_keepalives_until_our_token_is_acked(peer):
    connection = BackboneConnection(peer.getsockname(), ConnectionOptions(flags=codec.FLAG_BATCH),
                                    token_source=counted_tokens())

    def backbone():  # silent to the first KEEPALIVE, answers the second (and a wrong token before it)
        peer.recvfrom(100)
        data, source = peer.recvfrom(100)
        keepalive, = codec.decode(data)
        peer.sendto(codec.encode(codec.KeepaliveAck(token=bytes(16))), source)
        peer.sendto(codec.encode(codec.KeepaliveAck(token=keepalive.token)), source)

    thread = threading.Thread(target=backbone)
    thread.start()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        assert keepalive_handshake(sock, connection, 5.0, every=0.05)
    thread.join()
    assert connection.last_ack is not None and connection.stats["unknown tokens"] == 1


# ---------------------------------------------------------------- the socket


def test_open_socket_binds_where_the_backbone_is_reached_from(peer):
    sock = open_socket(peer.getsockname())
    try:
        host, port = sock.getsockname()
        assert host == LOOPBACK and port > 0  # a loopback backbone: reachable on loopback alone
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) >= 2 * 65536
    finally:
        sock.close()
    port = free_port()
    bound = open_socket(peer.getsockname(), bind=(LOOPBACK, port), style=gevent_style(), send_buffer=True)
    try:
        assert bound.getsockname() == (LOOPBACK, port) and isinstance(bound, gevent.socket.socket)
    finally:
        bound.close()


def test_goodbye_goes_to_the_backbone_and_a_closed_socket_is_no_error(peer):
    connection = BackboneConnection(peer.getsockname(), ConnectionOptions(flags=codec.FLAG_BATCH),
                                    token_source=counted_tokens())
    sock = open_socket(peer.getsockname())
    say_goodbye(sock, connection)
    data, source = peer.recvfrom(100)
    assert source == sock.getsockname()
    keepalive, = codec.decode(data)
    assert keepalive.flags == codec.FLAG_NOSUBSCRIBE | codec.FLAG_NOJOURNAL
    sock.close()
    say_goodbye(sock, connection)  # nothing to stop any more
    assert not sent(sock, b"x", peer.getsockname())


# ---------------------------------------------------------------- answering FORWARDs


def _store(count: int) -> RecentMessages:
    store = RecentMessages(1 << 20)
    store.add_many((seq, b"m%d" % seq) for seq in range(1, count + 1))
    return store


def test_answer_forward_sends_what_is_held_of_the_range_each_datagram_counted():
    out, stats = [], Counter()
    forward = codec.Forward("127.0.0.1", 4000, 3, 12)  # 11 and 12 are not held
    answer_forward(forward, _store(10), forward_bucket(1e6), lambda d, t: out.append((d, t)) or True, stats)
    assert [codec.decode(d)[0].seq for d, _ in out] == list(range(3, 11))
    assert {target for _, target in out} == {("127.0.0.1", 4000)}
    assert stats == Counter({"forwarded": 8})
    failed = Counter()
    answer_forward(forward, _store(10), forward_bucket(1e6), lambda d, t: False, failed)
    assert failed == Counter({"send errors": 8})


def test_answer_forward_waits_for_tokens_with_the_styles_sleep_and_stops_when_told():
    slept, out = [], []
    style = replace(THREADS, name="test", sleep=lambda seconds: slept.append(seconds) or time.sleep(seconds))
    bucket = TokenBucket(1000.0, burst=2, now=time.monotonic())
    answer_forward(codec.Forward("127.0.0.1", 4000, 1, 5), _store(5), bucket, lambda d, t: out.append(d) or True,
                   Counter(), style=style)
    assert len(out) == 5 and slept and all(0 < wait <= 0.0011 for wait in slept)  # two at once, then paced
    out.clear()
    answer_forward(codec.Forward("127.0.0.1", 4000, 1, 5), _store(5), forward_bucket(1e6),
                   lambda d, t: out.append(d) or True, Counter(), stopped=lambda: len(out) >= 2)
    assert len(out) == 2


def test_a_driver_stopped_while_it_waited_takes_no_token_and_sends_nothing():
    stopped = []
    style = replace(THREADS, name="test", sleep=lambda seconds: stopped.append(True))
    bucket = TokenBucket(1.0, burst=1, now=time.monotonic())  # one at once, the next a second later
    out = []
    answer_forward(codec.Forward("127.0.0.1", 4000, 1, 5), _store(5), bucket, lambda d, t: out.append(d) or True,
                   Counter(), style=style, stopped=lambda: bool(stopped))
    assert len(out) == 1 and bucket.wait_time(time.monotonic()) > 0  # the token after the wait was never taken


def test_forward_bucket_paces_at_the_rate_with_the_default_burst():
    bucket = forward_bucket(500)
    assert (bucket.rate, bucket.burst) == (500, FORWARD_BURST)


def test_the_constants_live_here_once():
    from fyrehose.drivers import client, link
    from fyrehose.journal import service

    # (not fyrehose.loadtest.users: importing Locust monkey-patches the test process)
    assert client.RECEIVE_BUFFER is backbone_io.RECEIVE_BUFFER and link.RECEIVE_BUFFER is backbone_io.RECEIVE_BUFFER
    assert service.UNREACHABLE_AFTER is link.UNREACHABLE_AFTER is backbone_io.UNREACHABLE_AFTER


# ---------------------------------------------------------------- the start-up probe


def test_a_running_backbone_answers(backbone):
    wait_for_backbone(backbone.addr, timeout=EVENT_WITHIN)
    assert keepalive_answered(backbone.addr, wait=EVENT_WITHIN)


def _silent_addr() -> tuple[str, int]:
    return LOOPBACK, free_port(socket.SOCK_DGRAM)


def _keepalives(sock: socket.socket) -> int:
    """The KEEPALIVEs waiting on ``sock`` (a peer that never answers), read without blocking."""
    sock.setblocking(False)
    count = 0
    for _ in range(10_000):
        try:
            data = sock.recv(100)
        except BlockingIOError:
            return count
        count += data[:1] == bytes((codec.KEEPALIVE,))
    return count


def test_keepalive_answered_is_false_when_nobody_listens():
    assert not keepalive_answered(_silent_addr(), wait=0.1)


def test_keepalive_answered_is_false_when_the_keepalive_goes_unanswered():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as silent:
        silent.bind((LOOPBACK, 0))
        assert not keepalive_answered(silent.getsockname(), wait=0.1)
        assert _keepalives(silent) == 1  # it asked once


def test_keepalive_answered_ignores_other_datagrams():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as fake:  # answers with a wrong token, then junk
        fake.bind((LOOPBACK, 0))
        fake.settimeout(2.0)
        addr = fake.getsockname()

        def answer():
            try:
                _, source = fake.recvfrom(100)
            except OSError:
                return
            fake.sendto(bytes((0x20,)) + bytes(16), source)
            fake.sendto(b"junk", source)

        thread = threading.Thread(target=answer)
        thread.start()
        assert not keepalive_answered(addr, wait=0.3)
        thread.join()


def test_wait_for_backbone_keeps_asking_then_times_out_when_nobody_answers():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as silent:
        silent.bind((LOOPBACK, 0))
        host, port = addr = silent.getsockname()
        with pytest.raises(TimeoutError, match=f"backbone at {host}:{port} did not answer within 1 s"):
            wait_for_backbone(addr, timeout=1.0)
        assert _keepalives(silent) >= 2  # asked again after the first attempt went unanswered


