"""``fyrehose gateway KIND --workers N``: N processes on one port, one order, a dead worker stops the gateway."""
from __future__ import annotations

import os
import re
import signal
import socket
import time

import pytest

from gateway_support import GatewayProcess
from support import EVENT_WITHIN, LOOPBACK, wait_until

WORKERS = 2


@pytest.fixture
def workers_gateway(module_backbone, tmp_path):
    gateway = GatewayProcess("redis", module_backbone.address, tmp_path, ["--workers", str(WORKERS)]).start()
    pids = _pids(gateway)
    yield gateway
    gateway.stop()  # SIGTERM: the supervisor stops its workers
    for pid in pids:  # every process this test started is gone, whatever the test did to the supervisor
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)


def _pids(gateway: GatewayProcess) -> list[int]:
    found = re.search(r"workers: pids ([\d, ]+)\)", gateway.output())
    assert found, gateway.output()
    return [int(pid) for pid in found.group(1).split(", ")]


def _connect(gateway: GatewayProcess) -> socket.socket:
    sock = socket.create_connection((LOOPBACK, gateway.port), timeout=10)
    return sock


def _read_until(sock: socket.socket, wanted: bytes) -> bytes:
    data = b""
    deadline = time.monotonic() + 10
    while not data.endswith(wanted):
        assert time.monotonic() < deadline, f"no {wanted!r} in {data!r}"
        chunk = sock.recv(65536)
        assert chunk, f"connection closed after {data!r}"
        data += chunk
    return data


def test_workers_share_the_port_and_every_subscriber_sees_one_order(workers_gateway):
    pids = _pids(workers_gateway)
    assert len(pids) == WORKERS and os.getpid() not in pids
    subscribers = []
    for _ in range(8):  # the kernel spreads connections over the workers
        sock = _connect(workers_gateway)
        sock.sendall(b"SUBSCRIBE workers.x\r\n")
        _read_until(sock, b":1\r\n")
        subscribers.append(sock)
    publishers = [_connect(workers_gateway) for _ in range(4)]

    def counted() -> bool:  # every worker's subscribers are counted through the others' announcements
        publishers[0].sendall(b"PUBLISH workers.x probe\r\n")
        return _read_until(publishers[0], b"\r\n") == b":8\r\n"

    wait_until(counted, EVENT_WITHIN, "all eight subscribers counted")
    for round_number in range(5):
        for number, publisher in enumerate(publishers):
            publisher.sendall(b"PUBLISH workers.x m%d.%d\r\n" % (round_number, number))
    for publisher in publishers:
        replies = b""
        while replies.count(b"\r\n") < 5:
            replies += _read_until(publisher, b"\r\n")
        assert replies == b":8\r\n" * 5
    expected_messages = 20
    streams = []
    for sock in subscribers:
        data = b""
        deadline = time.monotonic() + 10
        while data.count(b"$7\r\nmessage\r\n") < expected_messages:
            assert time.monotonic() < deadline, data
            data += sock.recv(65536)
        streams.append(re.findall(rb"\$4\r\n(m\d\.\d)\r\n", data))
    assert all(len(stream) == expected_messages for stream in streams)
    assert all(stream == streams[0] for stream in streams)  # one backbone order on every worker
    for sock in subscribers + publishers:
        sock.close()


def test_receiver_counts_include_the_other_workers_clients(workers_gateway):
    subscribers = []
    for _ in range(6):
        sock = _connect(workers_gateway)
        sock.sendall(b"SUBSCRIBE workers.count6\r\n")
        _read_until(sock, b":1\r\n")
        subscribers.append(sock)
    publisher = _connect(workers_gateway)

    def all_counted() -> bool:
        publisher.sendall(b"PUBLISH workers.count6 x\r\n")
        return _read_until(publisher, b"\r\n") == b":6\r\n"

    wait_until(all_counted, EVENT_WITHIN, "the six subscribers counted from whichever worker the publisher reached")
    for sock in subscribers + [publisher]:
        sock.close()


def test_sigterm_stops_every_worker_and_exits_zero(workers_gateway):
    pids = _pids(workers_gateway)
    assert workers_gateway.stop() == 0
    for pid in pids:
        assert not _alive(pid)


def test_a_dead_worker_makes_the_gateway_exit_non_zero(workers_gateway):
    pids = _pids(workers_gateway)
    os.kill(pids[0], signal.SIGKILL)
    assert workers_gateway.child is not None
    wait_until(lambda: not workers_gateway.alive(), EVENT_WITHIN, "the supervisor exiting after its worker's death")
    assert workers_gateway.child.proc.returncode == 1
    assert f"gateway worker 0 (pid {pids[0]}) exited" in workers_gateway.output()
    for pid in pids[1:]:
        wait_until(lambda pid=pid: not _alive(pid), EVENT_WITHIN, f"worker {pid} stopped")


def test_workers_stop_by_themselves_when_their_supervisor_is_killed(workers_gateway):
    pids = _pids(workers_gateway)
    workers_gateway.kill()  # SIGKILL: the supervisor cannot stop anyone
    for pid in pids:
        wait_until(lambda pid=pid: not _alive(pid), EVENT_WITHIN, f"orphaned worker {pid} stopping by itself")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (exited, not yet reaped by its parent) counts as gone
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False
