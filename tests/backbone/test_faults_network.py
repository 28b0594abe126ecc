"""Network faults between clients and the backbone, and a full send or receive buffer.

Expected outcomes: with loss, reordering and duplication injected in both
directions, every published message is confirmed with a distinct sequence and
every subscriber gets each one exactly once, in order (REQUEST recovery, tag
de-duplication and the tracker together).  A send buffer that stays full makes
the backbone's send path wait once, then drop and count ("send buffer full")
without blocking; on a shaped link (a namespace whose loopback is behind a
token bucket) the kernel's real EAGAIN hits the backbone and the publisher,
and the result is still one sequence per message and every sequence either
delivered once or reported lost, never repeated or skipped silently.  A subscriber that stops reading long enough for its receive
buffer to overflow recovers every message through REQUEST once it reads again.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading
import time
from collections import Counter

import pytest

from fyrehose import Client
from fyrehose.backbone.host.udp import send_all
from fyrehose.protocol.tracker import Lost, Message

from faults import FaultRelay
from netns import ShapedNamespace, namespaces_available
from support import FYREHOSE, BackboneProcess, take


def test_loss_reordering_and_duplication_both_ways_lose_and_repeat_nothing(backbone):
    faults = dict(drop=0.05, reorder=0.05, duplicate=0.05)
    with FaultRelay(backbone.addr, seed=1, **faults) as pub_relay, \
            FaultRelay(backbone.addr, seed=2, **faults) as sub_relay, \
            Client(backbone.addr) as keeper, \
            Client(sub_relay.addr, keepalive_interval=0.02) as sub, \
            Client(pub_relay.addr, subscribe=False) as pub:
        keeper.subscribe()
        # from the backbone's first number: its KEEPALIVE too crosses the faulty relay, and the backbone may learn of
        # the subscriber only after the first publishes; those it gets back through the keeper like any other loss
        stream = sub.subscribe(from_seq=1)
        payloads = [b"through faults %d" % i for i in range(300)]
        seqs = [pub.publish(p, timeout=20) for p in payloads[:100]]  # one datagram (and CONFIRM) each
        for start in range(100, len(payloads), 20):
            seqs += pub.publish_many(payloads[start:start + 20], timeout=20)
        events = take(stream, len(payloads))
    assert len(set(seqs)) == len(seqs) == len(payloads)
    assert all(isinstance(e, Message) for e in events)
    assert [e.seq for e in events] == seqs
    assert [e.data for e in events] == payloads
    counts = pub_relay.counts + sub_relay.counts
    for fault in ("dropped", "reordered", "duplicated"):  # each fault really happened, both ways
        for direction in ("up", "down"):
            assert counts[f"{direction} {fault}"] > 0, (pub_relay.counts, sub_relay.counts)


class CountingSocket:
    """A real socket, counting the sends tried on it."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.sends = 0

    def fileno(self) -> int:
        return self.sock.fileno()

    def sendto(self, data: bytes, address) -> int:
        self.sends += 1
        return self.sock.sendto(data, address)


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
        counted = CountingSocket(sender)
        sending = threading.Thread(target=send_all, args=(counted, [(b"%d" % i, path) for i in range(100)], counters),
                                   kwargs={"wait": 0.01})
        sending.start()
        sending.join(30)
        assert not sending.is_alive(), "send_all blocked on a send buffer that stays full"
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
    # one try for each datagram sent, two (a try, then one more after the wait) for each dropped: nobody read the
    # queue meanwhile, so no second try could succeed
    assert counted.sends == received + 2 * counters["drop:send buffer full"]


@pytest.mark.skipif(namespaces_available() is not None, reason=str(namespaces_available()))
@pytest.mark.parametrize("workers", [0, 2], ids=lambda w: f"workers={w}")
def test_real_eagain_on_a_shaped_link_repeats_nothing_and_recovers_every_gap(tmp_path, workers):
    """A 20 Mbit/s loopback and a 64 KiB backbone socket buffer: the backbone's sends meet EAGAIN at once.

    Both subscribers miss the same datagrams, so no journaling client holds them; the backbone
    re-delivers them from its own recent log (with ``--recent-bytes 0`` each subscriber lost
    2,295 of 6,001 messages in single-process mode and 2,964 in multi-process mode).
    """
    count = 6000
    payloads = {index: b"%06d" % index + b"x" * 250 for index in range(count)}
    with ShapedNamespace(rate="20mbit", burst="64kb", limit="64mb") as namespace, namespace.inside():
        backbone = BackboneProcess(tmp_path / "state", workers=workers, prefix=namespace.prefix,
                                   extra=["--socket-buffer", "65536"]).start()
        try:
            with Client(backbone.addr) as first, Client(backbone.addr) as second, \
                    Client(backbone.addr, subscribe=False) as publisher:
                streams = [first.subscribe(on_loss="yield"), second.subscribe(on_loss="yield")]
                seqs = publisher.publish_many(list(payloads.values()), timeout=20)
                last = publisher.publish(b"after the burst", timeout=20)
                seen = [take_through(stream, last, timeout=60) for stream in streams]
                sent_errors = publisher.stats["send errors"]
            dropped = backbone.metric('fyrehose_dropped_total{reason="send buffer full"}')
            redelivered = backbone.metric("fyrehose_redelivered_total")
            assert backbone.proc.poll() is None
        finally:
            backbone.stop()
    assert dropped > 0, "the backbone never met a full send buffer: the fault did not happen"
    # one sequence per message; a datagram the publisher's own full buffer refused is retried after the
    # rest of its window, so its messages may be sequenced after later ones (publish_many keeps no order then)
    assert len(set(seqs)) == count and last > max(seqs)
    by_seq = dict(zip(seqs, payloads.values()))
    by_seq[last] = b"after the burst"
    for events in seen:
        position = None
        for event in events:
            first_seq = event.from_seq if isinstance(event, Lost) else event.seq
            assert position is None or first_seq == position + 1, "a sequence was repeated or skipped silently"
            position = event.to_seq if isinstance(event, Lost) else event.seq
            if isinstance(event, Message):
                assert event.data == by_seq[event.seq]
        assert isinstance(events[-1], Message) and events[-1].seq == last  # served normally after the burst
        assert not [event for event in events if isinstance(event, Lost)], "the backbone still held these"
    assert redelivered > 0
    print(f"workers={workers}: backbone send-buffer drops {dropped:g}, re-delivered {redelivered:g}, "
          f"publisher send errors {sent_errors}, "
          f"lost per subscriber {[sum(e.count for e in ev if isinstance(e, Lost)) for ev in seen]}")


def take_through(stream, last: int, timeout: float) -> list:
    """Events until the one holding sequence ``last`` (bounded in time)."""
    events = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        event = stream.get(timeout=max(0.01, deadline - time.monotonic()))
        if event is None:
            continue
        events.append(event)
        if (event.to_seq if isinstance(event, Lost) else event.seq) >= last:
            return events
    raise AssertionError(f"sequence {last} not reached in {timeout} s; {len(events)} events")


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
