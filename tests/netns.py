"""Network namespaces of the test's own: a loopback shaped by a token bucket filter (tc tbf), or one
where multicast may flow without ever touching the host's own namespace.

Loopback in the test's normal namespace never fills a UDP send buffer: a
datagram is handed to the receiver at once and stops counting against the
sender.  Behind a tbf qdisc with a queue longer than the sender's buffer,
datagrams wait in the queue while still charged to the sending socket, so a
fast sender gets real EAGAIN from ``sendto`` (as on a slow NIC or a congested
uplink).  A multicast namespace keeps every group socket of a test
away from the host's interfaces (TTL 1, interface set explicitly).  Needs root and iproute2 (``ip``, ``tc``); the namespace is deleted
on exit, with every process still in it left to the caller to stop.
"""
from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def namespaces_available() -> str | None:
    """Why this machine cannot create a shaped namespace, or None when it can."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"{tool} (iproute2) is not installed"
    return None


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, os.strerror(errno))


def _run(*args: str) -> None:
    subprocess.run(args, check=True, capture_output=True, timeout=30)


class Namespace:
    """``ip netns add`` with loopback up; subclasses add what their tests need in :meth:`configure`."""

    def __init__(self) -> None:
        self.name = f"fyrehose-test-{os.getpid()}-{time.monotonic_ns() % 1_000_000}"

    def configure(self) -> None:
        """Shape the namespace after loopback is up (``ip -n NAME ...``)."""

    def __enter__(self) -> Namespace:
        _run("ip", "netns", "add", self.name)
        try:
            _run("ip", "-n", self.name, "link", "set", "lo", "up")
            self.configure()
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        subprocess.run(["ip", "netns", "delete", self.name], capture_output=True, timeout=30)

    @property
    def prefix(self) -> list[str]:
        """Runs a command inside (``ip netns exec`` execs it: the PID is the command's own)."""
        return ["ip", "netns", "exec", self.name]

    @contextmanager
    def inside(self) -> Iterator[None]:
        """Sockets this thread creates meanwhile belong to the namespace (and stay there afterwards)."""
        with open("/proc/thread-self/ns/net") as home, open(f"/run/netns/{self.name}") as target:
            _setns(target.fileno())
            try:
                yield
            finally:
                _setns(home.fileno())


class ShapedNamespace(Namespace):
    """``tbf rate RATE burst BURST limit LIMIT`` on the namespace's loopback."""

    def __init__(self, rate: str = "20mbit", burst: str = "64kb", limit: str = "64mb") -> None:
        super().__init__()
        self.qdisc = ["tbf", "rate", rate, "burst", burst, "limit", limit]

    def configure(self) -> None:
        _run("tc", "-n", self.name, "qdisc", "add", "dev", "lo", "root", *self.qdisc)


class MulticastNamespace(Namespace):
    """Multicast kept inside: the group is routed on this namespace's loopback, and a veth pair
    (``mc0`` 10.213.0.1/24, ``mc1`` 10.213.0.2/24) is a second interface that the group is not sent on."""

    VETH = ("mc0", "10.213.0.1/24", "mc1", "10.213.0.2/24")

    def configure(self) -> None:
        first, first_net, second, second_net = self.VETH
        _run("ip", "-n", self.name, "link", "add", first, "type", "veth", "peer", "name", second)
        for device, network in ((first, first_net), (second, second_net)):
            _run("ip", "-n", self.name, "addr", "add", network, "dev", device)
            _run("ip", "-n", self.name, "link", "set", device, "up")
