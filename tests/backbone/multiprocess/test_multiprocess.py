"""The multi-process backbone (--workers R): its processes, their supervision, and the pieces only it uses.

The protocol itself is checked in both modes by the shared suites (conftest
BACKBONE_MODES); these tests cover what only this mode has: worker restarts,
a killed sequencer, draining on SIGTERM/SIGINT, shared memory left behind,
arrival order across receive workers, full rings, fan-out over several
workers, its metrics, and the sendmmsg and merge helpers.
"""
from __future__ import annotations

import ctypes
import os
import signal
import socket
import time
from collections import Counter
from contextlib import ExitStack

import psutil
import pytest

from fyrehose.backbone.host.sendmmsg import MAX_IOV, Sender
from fyrehose.backbone.multiprocess.fanout import worker_of
from fyrehose.backbone.multiprocess.sequencer import in_arrival_order
from fyrehose.backbone.multiprocess.supervisor import auto_workers, default_sizes
from fyrehose.protocol import codec
from fyrehose.runtime.process import ChildProcess

from support import EVENT_WITHIN, FYREHOSE, LOOPBACK, READY_WITHIN, run_cli, wait_until, workers_of

# ---------------------------------------------------------------- helpers


def open_socket(stack: ExitStack, rcvbuf: int = 8 << 20) -> socket.socket:
    sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_DGRAM))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.bind((LOOPBACK, 0))
    return sock


def keepalive(sock: socket.socket, backbone, flags: int = 0, timeout: float = 3.0) -> bytes:
    token = os.urandom(16)
    sock.sendto(codec.encode(codec.Keepalive(flags=flags, token=token)), backbone.addr)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            data, _ = sock.recvfrom(65536)
        except TimeoutError:
            break
        if data[:17] == bytes([codec.KEEPALIVE_ACK]) + token:
            return data
    raise AssertionError("no KEEPALIVE-ACK")


def delivers(sock: socket.socket, count: int, timeout: float = 5.0) -> list[tuple[int, bytes, int]]:
    """(sequence, data, frames in its datagram) of DELIVERs until ``count`` arrived or ``timeout`` passed."""
    got: list[tuple[int, bytes, int]] = []
    deadline = time.monotonic() + timeout
    for _ in range(count + 10000):
        if len(got) >= count or time.monotonic() > deadline:
            break
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            data, _ = sock.recvfrom(65536)
        except TimeoutError:
            break
        if data[0] == codec.DELIVER:
            frames = codec.decode(data)
            got.extend((f.seq, f.data, len(frames)) for f in frames)
    return got


def restarted(backbone, before: dict[str, psutil.Process], names: list[str]) -> bool:
    now = workers_of(backbone)
    return all(name in now and now[name].pid != before[name].pid for name in names)


def publish(backbone, sub: socket.socket, payloads: list[bytes]) -> list[int]:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as pub:
        for payload in payloads:
            pub.sendto(codec.encode_push(payload), backbone.addr)
        frames = delivers(sub, len(payloads))
    assert [data for _, data, _ in frames] == payloads
    return [seq for seq, _, _ in frames]


def shm_entries() -> set[str]:
    """Named shared memory that a backbone could have made (Python's shared_memory names start psm_)."""
    return {name for name in os.listdir("/dev/shm") if name.startswith(("psm_", "fyrehose"))}


def shm_mappings(processes: list[psutil.Process]) -> list[str]:
    """Files under /dev/shm that any of ``processes`` has mapped."""
    found = []
    for process in processes:
        with open(f"/proc/{process.pid}/maps") as maps:
            found += [line.split()[-1] for line in maps if "/dev/shm/" in line]
    return found


# ---------------------------------------------------------------- process tree and shutdown


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_drains_and_exits_cleanly_leaving_no_shared_memory(backbone_factory, signum):
    shm_before = shm_entries()
    backbone = backbone_factory(workers=2, extra=["--fanout", "2"])
    names = {"fh-receiver-0", "fh-receiver-1", "fh-sequencer", "fh-fanout-0", "fh-fanout-1"}
    assert wait_until(lambda: set(workers_of(backbone)) == names)
    children = list(workers_of(backbone).values())
    with ExitStack() as stack:
        sub = open_socket(stack)
        keepalive(sub, backbone, codec.FLAG_BATCH)
        issued = publish(backbone, sub, [b"m%d" % i for i in range(20)])
    assert shm_mappings([psutil.Process(backbone.proc.pid)] + children) == [], "shared memory must be anonymous"
    assert shm_entries() <= shm_before
    os.kill(backbone.proc.pid, signum)
    code = backbone.proc.wait(10)  # a bounded wait: TimeoutExpired if it hangs
    assert code == 0
    assert not [child for child in children if child.is_running() and child.status() != psutil.STATUS_ZOMBIE]
    assert shm_entries() <= shm_before
    assert (backbone.state_dir / "sequence").read_text().strip() == str(max(issued))


def test_killed_workers_are_restarted_counted_and_the_service_goes_on(backbone_factory):
    backbone = backbone_factory(workers=2, extra=["--fanout", "2"])
    with ExitStack() as stack:
        subs = [open_socket(stack) for _ in range(4)]
        for i, sub in enumerate(subs):
            keepalive(sub, backbone, codec.FLAG_BATCH if i % 2 else 0)
        assert wait_until(lambda: len(workers_of(backbone)) == 5 and "python" not in workers_of(backbone))
        before = workers_of(backbone)
        killed = ["fh-receiver-0", "fh-receiver-1", "fh-fanout-0", "fh-fanout-1"]
        for name in killed:
            before[name].kill()
        assert wait_until(lambda: restarted(backbone, before, killed))
        metrics = backbone.metrics()
        for name in ("receiver-0", "receiver-1", "fanout-0", "fanout-1"):
            assert metrics[f'fyrehose_worker_restarts_total{{worker="{name}"}}'] == 1
        assert metrics['fyrehose_worker_restarts_total{worker="sequencer"}'] == 0
        payloads = [b"after restart %d" % i for i in range(10)]
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as pub:
            for p in payloads:
                pub.sendto(codec.encode_push(p), backbone.addr)
        for sub in subs:  # the clients registered before the crash are still served
            assert [data for _, data, _ in delivers(sub, 10)] == payloads


def test_kill_9_of_the_sequencer_never_reuses_a_sequence(backbone_factory):
    backbone = backbone_factory(workers=2)
    with ExitStack() as stack:
        sub = open_socket(stack)
        keepalive(sub, backbone)
        first = publish(backbone, sub, [b"before %d" % i for i in range(30)])
        assert first == list(range(1, 31))
        assert wait_until(lambda: "fh-sequencer" in workers_of(backbone))
        before = workers_of(backbone)
        before["fh-sequencer"].kill()
        assert wait_until(lambda: restarted(backbone, before, ["fh-sequencer"]))
        # no new KEEPALIVE: the restarted sequencer found the client table in shared memory
        second = publish(backbone, sub, [b"after %d" % i for i in range(30)])
        assert min(second) > max(first)
        assert second == list(range(second[0], second[0] + 30))
        assert backbone.metric('fyrehose_worker_restarts_total{worker="sequencer"}') == 1
        assert keepalive(sub, backbone, codec.FLAG_HEAD)[17:] == max(second).to_bytes(6, "big")


def test_kill_9_of_the_supervisor_takes_every_worker_with_it(backbone_factory):
    backbone = backbone_factory(workers=2)
    assert wait_until(lambda: len(workers_of(backbone)) == 4 and "python" not in workers_of(backbone))
    children = list(workers_of(backbone).values())
    with ExitStack() as stack:
        sub = open_socket(stack)
        keepalive(sub, backbone)
        issued = publish(backbone, sub, [b"x%d" % i for i in range(5)])
    backbone.kill()
    assert wait_until(lambda: not any(c.is_running() and c.status() != psutil.STATUS_ZOMBIE for c in children), EVENT_WITHIN)
    again = backbone_factory(workers=2, state_dir=backbone.state_dir)  # the state lock was released
    with ExitStack() as stack:
        sub = open_socket(stack)
        keepalive(sub, again)
        assert min(publish(again, sub, [b"y"])) > max(issued)


# ---------------------------------------------------------------- behaviour specific to several processes


def test_publishers_on_different_receive_workers_are_sequenced_in_arrival_order(backbone_factory):
    backbone = backbone_factory(workers=2)
    with ExitStack() as stack:
        sub = open_socket(stack)
        keepalive(sub, backbone)
        publishers = [open_socket(stack) for _ in range(8)]  # the 4-tuple hash spreads them over both workers
        expected = []
        for round_ in range(5):
            for i, pub in enumerate(publishers):
                payload = b"round %d publisher %d" % (round_, i)
                pub.sendto(codec.encode_push(payload), backbone.addr)
                expected.append(payload)
        assert [data for _, data, _ in delivers(sub, len(expected))] == expected


def test_two_fanout_workers_serve_every_subscriber_once_in_order(backbone_factory):
    backbone = backbone_factory(workers=1, extra=["--fanout", "2", "--batch-bytes", "1472"])
    with ExitStack() as stack:
        socks = [open_socket(stack) for _ in range(6)]
        for _ in range(50):  # the kernel picks the ports: take sockets until both workers have some
            if {worker_of(sock.getsockname(), 2) for sock in socks} == {0, 1}:
                break
            socks.append(open_socket(stack))
        socks = sorted(socks, key=lambda sock: worker_of(sock.getsockname(), 2))
        socks = socks[:3] + socks[-3:]  # three of the first worker's, three of the second's
        subs = [(sock, i % 2 == 0) for i, sock in enumerate(socks)]
        for sock, batch in subs:
            keepalive(sock, backbone, codec.FLAG_BATCH if batch else 0)
        served = {worker_of(sock.getsockname(), 2) for sock, _ in subs}
        payloads = [b"%04d" % i * 25 for i in range(300)]  # 100-byte messages, 14 fit in 1472 bytes
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as pub:
            for start in range(0, 300, 30):
                pub.sendto(b"".join(codec.encode_push(p) for p in payloads[start:start + 30]), backbone.addr)
        for sock, batch in subs:
            frames = delivers(sock, 300)
            assert [(seq, data) for seq, data, _ in frames] == list(zip(range(1, 301), payloads))
            sizes = {n for _, _, n in frames}
            assert (max(sizes) > 1) if batch else (sizes == {1})
            assert max(sizes) <= 1472 // 109
        assert not delivers(subs[0][0], 1, timeout=0.3), "nothing twice"
    assert served == {0, 1}, "the subscribers should have been spread over both fan-out workers"
    metrics = backbone.metrics()
    assert metrics["fyrehose_delivered_total"] == 300 * 6
    assert metrics['fyrehose_subscribers{batch="yes"}'] == 3


def test_full_ring_drops_and_counts_and_the_backbone_recovers(backbone_factory):
    backbone = backbone_factory(workers=1)
    sequencer = wait_until(lambda: workers_of(backbone).get("fh-sequencer"))
    sequencer.suspend()
    try:
        chunk = codec.encode_push(bytes(65000))
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as pub:
            for i in range(800):  # 52 MB: more than the 32 MiB ring to the sequencer holds
                pub.sendto(chunk, backbone.addr)
                if i % 50 == 49:
                    time.sleep(0.01)  # let the receive worker keep the socket empty
        assert wait_until(lambda: backbone.metric('fyrehose_dropped_total{reason="ring full"}') > 0)
        assert backbone.metric('fyrehose_ring_fill_ratio{ring="receiver-0"}') > 0.9
    finally:
        sequencer.resume()
    with ExitStack() as stack:
        sub = open_socket(stack)
        keepalive(sub, backbone, timeout=10)
        assert wait_until(lambda: backbone.metric('fyrehose_ring_fill_ratio{ring="receiver-0"}') == 0)
        # flood messages sequenced in the sequencer round that registered us came to us too (as in one
        # process, a round's messages go to the subscribers of the end of that round): skip them
        for _ in range(1000):  # at most 800 flood messages
            if not delivers(sub, 1, timeout=0.3):
                break
        pushed = backbone.metric("fyrehose_pushes_total")
        dropped = backbone.metric('fyrehose_dropped_total{reason="ring full"}')
        assert pushed + dropped >= 790 and pushed > 0  # every datagram either sequenced or counted (a few may
        # have been dropped by the kernel's socket buffer, which no process sees)
        publish(backbone, sub, [b"still serving"])


def test_metrics_cover_every_process_ring_and_drop_reason(backbone_factory):
    backbone = backbone_factory(workers=2, extra=["--fanout", "2"])
    before = backbone.metrics()
    with ExitStack() as stack:
        sock = open_socket(stack)
        sock.sendto(b"\x03junk", backbone.addr)
        sock.sendto(codec.encode(codec.Keepalive("127.0.0.2", 1)), backbone.addr)
        keepalive(sock, backbone, codec.FLAG_NOSUBSCRIBE)
    metrics = backbone.metrics()
    for process in ("supervisor", "receiver-0", "receiver-1", "sequencer", "fanout-0", "fanout-1"):
        assert f'fyrehose_process_cpu_seconds_total{{process="{process}"}}' in metrics
        assert metrics[f'fyrehose_process_resident_bytes{{process="{process}"}}'] > 0
    for ring in ("receiver-0", "receiver-1", "log"):
        assert 0 <= metrics[f'fyrehose_ring_fill_ratio{{ring="{ring}"}}'] <= 1
    assert metrics['fyrehose_dropped_total{reason="malformed"}'] == 1
    assert metrics['fyrehose_dropped_total{reason="foreign address"}'] == 1
    assert metrics["fyrehose_journaling_clients"] == 1
    assert metrics["fyrehose_keepalives_total"] == before["fyrehose_keepalives_total"] + 1


def test_fanout_option_needs_worker_processes():
    result = run_cli("backbone", "--workers", "0", "--fanout", "2", "--listen", "127.0.0.1:0")
    assert result.returncode == 1
    assert b"--fanout needs --workers" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


# ---------------------------------------------------------------- pure helpers


def test_default_sizes_keep_one_cpu_for_the_sequencer():
    assert default_sizes(2) == (1, 1)
    assert default_sizes(4) == (1, 2)
    assert default_sizes(16) == (5, 10)
    assert default_sizes(16, workers=2) == (2, 13)


def test_worker_of_is_stable_and_spreads_addresses():
    addrs = [("127.0.0.1", port) for port in range(40000, 40100)]
    assert [worker_of(a, 4) for a in addrs] == [worker_of(a, 4) for a in addrs]
    assert {worker_of(a, 4) for a in addrs} == {0, 1, 2, 3}


def test_arrival_merge_keeps_each_rings_order_and_stops_at_the_cutoff():
    rings = [[(10, "a1"), (30, "a2"), (5, "a3-clock-stepped-back")], [(20, "b1"), (40, "b2")]]
    assert list(in_arrival_order(rings, 100)) == [(0, "a1"), (1, "b1"), (0, "a2"), (0, "a3-clock-stepped-back"),
                                                  (1, "b2")]
    assert list(in_arrival_order(rings, 25)) == [(0, "a1"), (1, "b1")]
    assert list(in_arrival_order([[], []], 100)) == []


def test_sendmmsg_sends_each_iovec_to_each_destination():
    with ExitStack() as stack:
        receivers = [open_socket(stack) for _ in range(3)]
        out = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_DGRAM))
        out.setblocking(False)
        counters = Counter()
        sender = Sender(out, counters, messages=4, iovecs=8)  # small arrays: forces intermediate sends
        keep = [bytearray(b"hello "), bytearray(b"world"), bytearray(b"!" * 10)]
        address = [ctypes.addressof(ctypes.c_char.from_buffer(b)) for b in keep]
        destinations = [sender.destination(r.getsockname()) for r in receivers]
        first = sender.iovec([(address[0], 6), (address[1], 5)])
        second = sender.iovec([(address[2], 10)])
        for dest in destinations:
            sender.add(dest, first)
            sender.add(dest, second)
        many = sender.iovec([(address[2], 1)] * (MAX_IOV + 5))  # more parts than one datagram may have
        sender.add(destinations[0], many)
        sender.add(sender.destination(("127.0.0.1", 0)), second)  # refused by the kernel: counted, skipped
        sender.add(destinations[1], second)
        sender.flush()
        for r in receivers:
            r.settimeout(2)
            got = [r.recv(65536) for _ in range(2)]
            assert got == [b"hello world", b"!" * 10]
        assert receivers[0].recv(65536) == b"!" * (MAX_IOV + 5)
        assert receivers[1].recv(65536) == b"!" * 10
        assert counters["drop:send error"] == 1
        assert sender.sent == 8


def test_workers_auto_picks_one_process_below_four_cpus_and_the_pipeline_above():
    assert [auto_workers(cpus) for cpus in (1, 2, 3)] == [0, 0, 0]
    assert [auto_workers(cpus) for cpus in (4, 8, 16)] == [default_sizes(cpus)[0] for cpus in (4, 8, 16)] == [1, 2, 5]


def test_workers_auto_starts_the_layout_it_picks_for_this_host(tmp_path):
    with ChildProcess(FYREHOSE + ["backbone", "--listen", "127.0.0.1:0", "--workers", "auto",
                                  "--state-dir", str(tmp_path / "state")], tmp_path / "backbone.log") as backbone:
        backbone.wait_ready(READY_WITHIN)
        single = auto_workers() == 0
        assert ("single process" in backbone.output()) == single
        assert ("receive workers" in backbone.output()) == (not single)
