"""Network faults between clients and the backbone, and a full send or receive buffer.

Expected outcomes: with loss, reordering and duplication injected in both
directions, every published message is confirmed with a distinct sequence and
every subscriber gets each one exactly once, in order (REQUEST recovery, tag
de-duplication and the tracker together).  A send buffer that stays full makes
the backbone's send path wait once, then drop and count ("send buffer full")
without blocking.  A subscriber that stops reading long enough for its receive
buffer to overflow recovers every message through REQUEST once it reads again.
"""
from __future__ import annotations

import errno
import os
import signal
import socket
import subprocess
import time
from collections import Counter

import pytest

from faults import FaultRelay
from fyrehose import Client
from fyrehose.backbone.udp import send_all
from fyrehose.tracker import Message
from support import FYREHOSE


def take(stream, count: int, timeout: float) -> list:
    got = []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        event = stream.get(timeout=max(0.01, deadline - time.monotonic()))
        if event is not None:
            got.append(event)
    return got


def test_loss_reordering_and_duplication_both_ways_lose_and_repeat_nothing(backbone):
    faults = dict(drop=0.05, reorder=0.05, duplicate=0.05)
    with FaultRelay(backbone.addr, seed=1, **faults) as pub_relay, \
            FaultRelay(backbone.addr, seed=2, **faults) as sub_relay, \
            Client(backbone.addr) as keeper, \
            Client(sub_relay.addr, keepalive_interval=0.02) as sub, \
            Client(pub_relay.addr, subscribe=False) as pub:
        keeper.subscribe()
        stream = sub.subscribe()
        payloads = [b"through faults %d" % i for i in range(300)]
        seqs = [pub.publish(p, timeout=20) for p in payloads[:100]]  # one datagram (and CONFIRM) each
        for start in range(100, len(payloads), 20):
            seqs += pub.publish_many(payloads[start:start + 20], timeout=20)
        events = take(stream, len(payloads), timeout=30)
    assert len(set(seqs)) == len(seqs) == len(payloads)
    assert all(isinstance(e, Message) for e in events)
    assert [e.seq for e in events] == seqs
    assert [e.data for e in events] == payloads
    counts = pub_relay.counts + sub_relay.counts
    for fault in ("dropped", "reordered", "duplicated"):  # each fault really happened, both ways
        for direction in ("up", "down"):
            assert counts[f"{direction} {fault}"] > 0, (pub_relay.counts, sub_relay.counts)


def test_a_send_buffer_that_stays_full_is_waited_on_once_then_dropped_and_counted(tmp_path):
    """Real EAGAIN from the kernel: a datagram socket whose peer never reads (AF_UNIX queues ~10 datagrams)."""
    path = str(tmp_path / "peer")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as peer, \
            socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sender:
        peer.bind(path)
        sender.setblocking(False)
        with pytest.raises(BlockingIOError):  # the fault is real: fill the queue until the kernel refuses
            for _ in range(10_000):
                sender.sendto(b"fill", path)
        peer.setblocking(False)
        drained = 0
        for _ in range(10_000):
            try:
                peer.recv(100)
            except BlockingIOError:
                break
            drained += 1
        counters: Counter[str] = Counter()
        started = time.monotonic()
        send_all(sender, [(b"%d" % i, path) for i in range(100)], counters, wait=0.01)
        elapsed = time.monotonic() - started
        received = 0
        for _ in range(200):
            try:
                peer.recv(100)
            except BlockingIOError:
                break
            received += 1
    assert drained > 0
    assert counters["drop:send buffer full"] > 0
    assert received + counters["drop:send buffer full"] == 100  # each datagram either sent or counted
    assert counters["drop:send error"] == 0
    assert elapsed < 100 * 0.01 + 5  # one bounded wait per datagram, never blocked


def _rcvbuf_errors() -> int:
    with open("/proc/net/snmp") as file:
        rows = [line.split() for line in file if line.startswith("Udp:")]
    return int(rows[1][rows[0].index("RcvbufErrors")])


def test_a_stalled_subscriber_overflows_its_receive_buffer_and_recovers_everything(backbone):
    count = 20_000
    payload = b"p" * 1000  # 20 MB: several times any socket buffer the subscriber can have
    with Client(backbone.addr) as keeper, Client(backbone.addr, subscribe=False) as pub:
        keeper.subscribe()
        first = pub.publish(b"start")
        sub = subprocess.Popen(FYREHOSE + ["sub", "--backbone", backbone.address, "--from", str(first),
                                           "--count", str(count + 1), "--timeout", "60"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            for _ in range(100):  # until it printed the first message: it is subscribed
                line = sub.stdout.readline()
                if line.startswith(b"%d\t" % first) or not line:
                    break
            overflowed_before = _rcvbuf_errors()
            os.kill(sub.pid, signal.SIGSTOP)
            try:
                seqs = pub.publish_many([payload] * count, timeout=20)
            finally:
                os.kill(sub.pid, signal.SIGCONT)
            overflowed = _rcvbuf_errors() - overflowed_before
            out, err = sub.communicate(timeout=90)
        finally:
            if sub.poll() is None:
                sub.kill()
                sub.wait(10)
    assert sub.returncode == 0, err.decode()[-2000:]
    printed = [int(line.split(b"\t", 1)[0]) for line in out.splitlines()]
    assert printed == seqs
    assert overflowed > 0  # the kernel really dropped datagrams the stalled subscriber could not take
