"""Two real backbones as a pair on loopback (each with its own client port, as no address can move here): the
standby follows, a promotion carries on above every grant, a retried PUSH gets its original number, a second
primary is fenced, and nothing sent to the pair port brings a member down.  Takeovers of a real moving address
are tested in namespaces (tests/backbone/pair/test_pair_namespaces.py)."""
from __future__ import annotations

import os
import random
import signal
import socket
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

from fyrehose import Client, Lost
from fyrehose.backbone.pair import frames
from fyrehose.loadtest.prometheus import parse_samples
from fyrehose.protocol import codec
from fyrehose.protocol.tracker import GONE_NEVER_SENT
from fyrehose.runtime.process import ChildProcess, wait_until
from tests.support import EVENT_WITHIN, FYREHOSE, LOOPBACK, READY_WITHIN, free_port


@dataclass
class Member:
    state_dir: Path
    port: int
    pair: int
    peer: int
    metrics_port: int
    extra: tuple[str, ...] = ()
    child: ChildProcess | None = None

    def start(self) -> Member:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        args = FYREHOSE + ["backbone", "--listen", f"{LOOPBACK}:{self.port}", "--state-dir", str(self.state_dir),
                           "--pair", f"{LOOPBACK}:{self.pair}", "--peer", f"{LOOPBACK}:{self.peer}",
                           "--metrics", f"{LOOPBACK}:{self.metrics_port}", *self.extra]
        self.child = ChildProcess(args, self.state_dir.parent / f"member-{self.port}.log")
        self.child.wait_ready(READY_WITHIN)
        return self

    @property
    def role(self) -> str:
        return (self.state_dir / "role").read_text().strip()

    def signal(self, signum: int) -> None:
        assert self.child is not None
        os.kill(self.child.proc.pid, signum)

    def metric(self, name: str) -> float:
        with urllib.request.urlopen(f"http://{LOOPBACK}:{self.metrics_port}/metrics", timeout=5) as response:
            return parse_samples(response.read().decode()).get(name, 0.0)

    def stop(self) -> None:
        if self.child is not None:
            self.child.stop(10)


@pytest.fixture
def pair(tmp_path):
    ports = [free_port() for _ in range(4)]
    metrics = [free_port(socket.SOCK_STREAM) for _ in range(2)]
    members = []

    def make(*extra: str) -> tuple[Member, Member]:
        a = Member(tmp_path / "a", ports[0], ports[2], ports[3], metrics[0], extra)
        b = Member(tmp_path / "b", ports[1], ports[3], ports[2], metrics[1], extra)
        members.extend((a, b))
        return a.start(), b.start()

    yield make
    for member in members:
        member.stop()


def push(sock: socket.socket, port: int, tag: int, data: bytes) -> codec.Confirm:
    sock.sendto(codec.encode(codec.Push(data, tag)), (LOOPBACK, port))
    frame, = codec.decode(sock.recv(100))
    assert isinstance(frame, codec.Confirm)
    return frame


@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
def test_the_standby_follows_and_a_promotion_carries_on_with_the_confirmed_numbers(pair, sync):
    a, b = pair(*(["--standby-sync"] if sync else []))
    assert a.role == b.role == "standby"
    assert int((a.state_dir / "pid").read_text()) == a.child.proc.pid
    a.signal(signal.SIGUSR1)
    wait_until(lambda: a.role == "primary", EVENT_WITHIN, "a promoted")
    wait_until(lambda: a.metric("fyrehose_pair_standby_attached") == 1, EVENT_WITHIN, "b attached")
    with Client(f"{LOOPBACK}:{a.port}") as publisher:
        numbers = [publisher.publish(b"m%d" % i) for i in range(300)]
    assert numbers == list(range(1, 301))
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((LOOPBACK, 0))
    sock.settimeout(EVENT_WITHIN)
    confirmed = push(sock, a.port, 77, b"tagged")
    wait_until(lambda: b.metric("fyrehose_pair_replicated_total") >= 301, EVENT_WITHIN, "b holds everything")
    epoch = a.metric("fyrehose_pair_epoch")  # 1 or 2: the lower pair address takes odd epochs, the higher even
    assert epoch in (1, 2)
    # (what b holds reaches a by b's next ACK: a heartbeat away in async mode)
    wait_until(lambda: a.metric("fyrehose_pair_replication_lag_messages") == 0, EVENT_WITHIN, "a heard b holds everything")
    a.child.kill()
    b.signal(signal.SIGUSR1)
    wait_until(lambda: b.role == "primary", EVENT_WITHIN, "b promoted")
    assert int((b.state_dir / "epoch").read_text()) == epoch + 1
    assert push(sock, b.port, 77, b"tagged") == confirmed  # the retry after the takeover: its original number
    fresh = push(sock, b.port, 78, b"new")
    assert fresh.seq > confirmed.seq + 1  # above every number a could have been granted
    with Client(f"{LOOPBACK}:{b.port}") as subscriber:
        stream = subscriber.subscribe(from_seq=1)
        got = [next(stream) for _ in range(301)]
    assert [message.data for message in got] == [b"m%d" % i for i in range(300)] + [b"tagged"]
    sock.close()


def test_a_primary_that_meets_a_newer_primary_stands_down_and_follows(pair):
    a, b = pair()
    a.signal(signal.SIGUSR1)
    wait_until(lambda: a.role == "primary", EVENT_WITHIN, "a promoted")
    # (b refuses a promotion while a, alive, has not attached it yet: a issues numbers no grant of b bounds)
    wait_until(lambda: a.metric("fyrehose_pair_standby_attached") == 1, EVENT_WITHIN, "b attached")
    b.signal(signal.SIGUSR1)  # split brain on purpose: b believes it must take over
    wait_until(lambda: b.role == "primary", EVENT_WITHIN, "b promoted")
    wait_until(lambda: a.role in ("standby", "fenced") and a.metric("fyrehose_pair_fenced_total") == 1, EVENT_WITHIN,
               "a fenced by b's newer epoch")
    wait_until(lambda: a.role == "standby", EVENT_WITHIN, "a caught up")
    assert b.metric("fyrehose_pair_role_primary") == 1 and a.metric("fyrehose_pair_role_primary") == 0
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((LOOPBACK, 0))
    sock.settimeout(0.5)
    sock.sendto(codec.encode(codec.Push(b"to a standby", 5)), (LOOPBACK, a.port))
    with pytest.raises(TimeoutError):  # a standby does not sequence
        sock.recv(100)
    b.signal(signal.SIGUSR2)
    wait_until(lambda: b.role == "standby", EVENT_WITHIN, "b demoted")
    sock.close()


@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
def test_a_primary_demoted_and_promoted_again_says_gone_for_what_it_skipped_and_no_subscriber_waits(pair, sync):
    a, b = pair(*(["--standby-sync"] if sync else []))
    a.signal(signal.SIGUSR1)
    wait_until(lambda: a.role == "primary", EVENT_WITHIN, "a promoted")
    wait_until(lambda: a.metric("fyrehose_pair_standby_attached") == 1, EVENT_WITHIN, "b attached")
    with Client(f"{LOOPBACK}:{a.port}", give_up_after=120.0) as subscriber, \
            Client(f"{LOOPBACK}:{a.port}", subscribe=False) as publisher:
        stream = subscriber.subscribe(on_loss="yield")
        before = publisher.publish(b"before")
        assert stream.get(EVENT_WITHIN).seq == before
        a.signal(signal.SIGUSR2)  # what keepalived does to a resumed master: BACKUP, then MASTER again
        wait_until(lambda: a.role != "primary", EVENT_WITHIN, "a demoted")
        a.signal(signal.SIGUSR1)
        wait_until(lambda: a.role == "primary", EVENT_WITHIN, "a promoted again")
        after = publisher.publish(b"after")
        assert after > before + 1  # above its reservation: the numbers between were never issued
        gone = stream.get(60)  # long before the give-up time (120 s): the backbone said so at once
        assert isinstance(gone, Lost) and (gone.from_seq, gone.to_seq) == (before + 1, after - 1)
        assert gone.reason == GONE_NEVER_SENT
        message = stream.get(60)
        assert message.seq == after and message.data == b"after"
    assert a.metric("fyrehose_pair_takeovers_total") == 2 and a.metric("fyrehose_gone_answers_total") >= 1


def test_garbage_and_forged_pair_datagrams_are_counted_and_the_members_stay_up(pair, tmp_path):
    key = tmp_path / "pair.key"
    key.write_bytes(random.Random(3).randbytes(32))
    a, b = pair("--pair-key", str(key))
    a.signal(signal.SIGUSR1)
    wait_until(lambda: a.role == "primary", EVENT_WITHIN, "a promoted")
    rng = random.Random(7)
    stranger = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    stranger.bind((LOOPBACK, 0))
    for _ in range(300):  # a stranger may send anything to a pair port: all of it is dropped and counted
        kind = rng.choice([0x81, 0x82, 0x83, 0x84, rng.randrange(256)])
        stranger.sendto(bytes([kind]) + rng.randbytes(rng.randrange(60)), (LOOPBACK, a.pair))
        stranger.sendto(bytes([kind]) + rng.randbytes(rng.randrange(60)), (LOOPBACK, b.pair))
    wait_until(lambda: a.metric('fyrehose_dropped_total{reason="pair foreign source"}') >= 300, EVENT_WITHIN, "a counted")
    wait_until(lambda: b.metric('fyrehose_dropped_total{reason="pair foreign source"}') >= 300, EVENT_WITHIN, "b counted")
    # from the peer's own address (spoofed, or the peer gone mad): without the key nothing is taken, not even
    # a well-formed ACK of a newer epoch that would make the primary stand down
    peer_sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    b.stop()
    peer_sock.bind((LOOPBACK, b.pair))
    forged = [bytes([rng.choice([0x81, 0x82, 0x83, 0x84])]) + rng.randbytes(rng.randrange(80)) for _ in range(300)]
    forged += [frames.encode_ack(99, 10**6, 10**9), frames.seal(frames.encode_ack(99, 1, 2), bytes(32))]
    for datagram in forged:
        peer_sock.sendto(datagram, (LOOPBACK, a.pair))
    wait_until(lambda: a.metric('fyrehose_dropped_total{reason="pair bad digest"}') >= len(forged), EVENT_WITHIN,
               "a counted the forgeries")
    assert a.child.proc.poll() is None and a.role == "primary" and a.metric("fyrehose_pair_fenced_total") == 0
    with Client(f"{LOOPBACK}:{a.port}") as publisher:
        assert publisher.publish(b"still here") >= 1
    peer_sock.close()
    stranger.close()


def test_pair_arguments_are_checked_in_one_line(tmp_path):
    from tests.support import run_cli

    short = tmp_path / "short.key"
    short.write_bytes(b"too short")
    for args, message in ((["--pair", "127.0.0.1:9"], "--pair needs --peer"),
                          (["--peer", "127.0.0.1:9"], "need --pair"),
                          (["--pair", "127.0.0.1:9", "--peer", "127.0.0.1:9"], "must be different"),
                          (["--pair", "127.0.0.1:9", "--peer", "127.0.0.1:8", "--workers", "2"], "--workers 0"),
                          (["--pair", "127.0.0.1:9", "--peer", "127.0.0.1:8", "--standby-timeout", "0"],
                           "not a positive duration"),
                          (["--pair", "127.0.0.1:9", "--peer", "127.0.0.1:8", "--pair-key", str(tmp_path / "no")],
                           "--pair-key"),
                          (["--pair", "127.0.0.1:9", "--peer", "127.0.0.1:8", "--pair-key", str(short)],
                           "16 to 64 bytes"),
                          (["--pair-key", str(short)], "need --pair")):
        result = run_cli("backbone", "--state-dir", str(tmp_path), *args)
        assert result.returncode != 0 and message in result.stderr.decode()
        assert len(result.stderr.decode().strip().splitlines()) == 1
