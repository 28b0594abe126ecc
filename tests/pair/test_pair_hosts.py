"""The pair's network (fyrehose.tools.bench.pair_hosts): hosts that reach each other, faults, and a clean teardown."""
from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from fyrehose.errors import CommandFailed
from fyrehose.tools.bench import pair_hosts
from fyrehose.tools.bench.pair_hosts import HOSTS, PairHosts, SplitBrain

from support import EVENT_WITHIN, wait_until

pytestmark = pytest.mark.skipif(pair_hosts.unavailable() is not None, reason=str(pair_hosts.unavailable()))

DATAGRAMS = 200


def udp_between(pair: PairHosts, sender: str, receiver: str) -> tuple[socket.socket, socket.socket]:
    """A socket bound on ``receiver``'s address inside it, and a socket inside ``sender``."""
    with pair.hosts[receiver].inside():
        inbound = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    inbound.bind((str(pair.address(receiver)), 0))
    inbound.settimeout(0.5)
    with pair.hosts[sender].inside():
        outbound = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    return inbound, outbound


def arrived(pair: PairHosts, sender: str, receiver: str, count: int) -> int:
    """How many of ``count`` datagrams from ``sender`` reach ``receiver``."""
    inbound, outbound = udp_between(pair, sender, receiver)
    with inbound, outbound:
        for number in range(count):
            outbound.sendto(b"%d" % number, inbound.getsockname())
        got = 0
        for _ in range(count):
            try:
                inbound.recv(64)
            except TimeoutError:
                break
            got += 1
        return got


def reconnected(pair: PairHosts, sender: str, receiver: str) -> None:
    wait_until(lambda: arrived(pair, sender, receiver, 1), EVENT_WITHIN, f"{sender} reaching {receiver} again")


def namespaces() -> str:
    return subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True, timeout=30).stdout


def test_every_host_reaches_every_other_and_nothing_holds_the_address_yet(tmp_path):
    with PairHosts(tmp_path / "pair") as pair:
        assert len({pair.address(host) for host in HOSTS}) == 3
        assert all(pair.address(host) in pair.subnet for host in HOSTS) and pair.vip.ip in pair.subnet
        for sender in HOSTS:
            for receiver in HOSTS:
                if sender != receiver:
                    assert arrived(pair, sender, receiver, 3) == 3, (sender, receiver)
        assert pair.vip_holder() is None


def test_a_cut_link_and_random_loss_each_come_and_go(tmp_path):
    with PairHosts(tmp_path / "pair") as pair:
        pair.link_down("a")
        assert arrived(pair, "client", "a", 3) == 0
        assert arrived(pair, "client", "b", 3) == 3
        pair.link_up("a")
        reconnected(pair, "client", "a")  # ARP asked while the link was down asks again within a second
        assert arrived(pair, "client", "a", 3) == 3
        pair.netem("b", 100)
        assert arrived(pair, "client", "b", 3) == 0 and arrived(pair, "b", "client", 3) == 0
        pair.netem("b", 30)
        lossy = arrived(pair, "client", "b", DATAGRAMS)
        assert DATAGRAMS * 0.5 < lossy < DATAGRAMS * 0.9  # 30% expected; far outside that is not chance
        pair.netem("b", 0)
        reconnected(pair, "client", "b")
        assert arrived(pair, "client", "b", 3) == 3
        with pytest.raises(ValueError):
            pair.netem("b", 101)


def test_who_holds_the_address_and_split_brain(tmp_path):
    with PairHosts(tmp_path / "pair") as pair:
        for host in ("a", "b"):
            subprocess.run([*pair.hosts[host].prefix, "ip", "addr", "add", str(pair.vip), "dev", "eth0"], check=True,
                           timeout=30)
            if host == "a":
                assert pair.vip_holder() == "a" and pair.wait_for_holder("a", 1) < 1
        assert pair.vip_holders() == ("a", "b")
        with pytest.raises(SplitBrain):
            pair.vip_holder()
        with pytest.raises(TimeoutError):
            pair.wait_for_holder(None, 0.2)


def test_leaving_stops_every_process_paused_ones_too_and_deletes_the_namespaces(tmp_path):
    with pytest.raises(RuntimeError, match="on purpose"), PairHosts(tmp_path / "pair") as pair:
        names = [namespace.name for namespace in (pair.switch, *pair.hosts.values())]
        assert all(name in namespaces() for name in names)
        sleeper = pair.start("client", ["sleep", "60"])
        stubborn = pair.start("a", [sys.executable, "-c", "import signal, time; "
                                    "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"])
        pair.pause(sleeper.pid)
        raise RuntimeError("on purpose")
    assert sleeper.poll() is not None and stubborn.poll() is not None
    assert not any(name in namespaces() for name in names)


def test_a_failed_setup_leaves_nothing_behind(tmp_path, monkeypatch):
    monkeypatch.setattr(pair_hosts, "BRIDGE", "a-name-too-long-for-a-link")
    pair = PairHosts(tmp_path / "pair")
    with pytest.raises(CommandFailed):
        pair.__enter__()
    assert pair.tag not in namespaces()
