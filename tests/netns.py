"""A network namespace of the test's own whose loopback is shaped by a token bucket filter (tc tbf).

Loopback in the test's normal namespace never fills a UDP send buffer: a
datagram is handed to the receiver at once and stops counting against the
sender.  Behind a tbf qdisc with a queue longer than the sender's buffer,
datagrams wait in the queue while still charged to the sending socket, so a
fast sender gets real EAGAIN from ``sendto`` (as on a slow NIC or a congested
uplink).  Needs root and iproute2 (``ip``, ``tc``); the namespace is deleted
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


class ShapedNamespace:
    """``ip netns add`` with loopback up and ``tbf rate RATE burst BURST limit LIMIT`` on it."""

    def __init__(self, rate: str = "20mbit", burst: str = "64kb", limit: str = "64mb") -> None:
        self.name = f"fyrehose-test-{os.getpid()}-{time.monotonic_ns() % 1_000_000}"
        self.qdisc = ["tbf", "rate", rate, "burst", burst, "limit", limit]

    def __enter__(self) -> ShapedNamespace:
        _run("ip", "netns", "add", self.name)
        try:
            _run("ip", "-n", self.name, "link", "set", "lo", "up")
            _run("tc", "-n", self.name, "qdisc", "add", "dev", "lo", "root", *self.qdisc)
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
