"""Network namespaces that benches and tests create for themselves, and delete again.

Multicast groups, shaped links, a VRRP pair moving an address: none of it may
touch the host's own interfaces, so whatever needs it runs in a namespace of
its own (``ip netns add``), which it deletes on the way out.  This is the one
way the project makes them; ``tests/netns.py`` shapes them for its tests and
:mod:`fyrehose.tools.bench.pair_hosts` wires several into a small network.
Needs root and iproute2.
"""
from __future__ import annotations

import ctypes
import itertools
import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager

from fyrehose.errors import CommandFailed

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)
_serial = itertools.count(1)  # namespaces made by this process, for unique names


def namespaces_available(*tools: str) -> str | None:
    """Why this machine cannot create a namespace (and run ``ip`` plus ``tools``), or None when it can."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", *tools):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    return None


def run(*argv: str, stdin: str | None = None) -> str:
    """Run a setup command (``ip``, ``tc``, ``nft``, ...) and return its stdout; one line of error if it fails."""
    done = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise CommandFailed(f"{' '.join(argv)}: {done.stderr.strip() or f'exit {done.returncode}'}")
    return done.stdout


def unique_name(prefix: str) -> str:
    """``PREFIX-PID-N``: unique among the namespaces of every process on the host."""
    return f"{prefix}-{os.getpid()}-{next(_serial)}"


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, os.strerror(errno))


class Namespace:
    """``ip netns add`` with loopback up; subclasses add what they need in :meth:`configure`.

    Named ``PREFIX-PID-N`` unless given a ``name`` (made unique by the caller).
    """

    def __init__(self, prefix: str = "fyrehose-test", *, name: str | None = None) -> None:
        self.name = name or unique_name(prefix)

    def configure(self) -> None:
        """Shape the namespace after loopback is up (``ip -n NAME ...``)."""

    def __enter__(self) -> Namespace:
        run("ip", "netns", "add", self.name)
        try:
            run("ip", "-n", self.name, "link", "set", "lo", "up")
            self.configure()
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        """Delete the namespace; the processes still inside are the caller's to stop, by PID."""
        subprocess.run(["ip", "netns", "delete", self.name], capture_output=True, timeout=30)

    @property
    def prefix(self) -> list[str]:
        """Runs a command inside (``ip netns exec`` execs it: the PID is the command's own)."""
        return ["ip", "netns", "exec", self.name]

    def pids(self) -> list[int]:
        """The processes inside the namespace now (``ip netns pids``)."""
        return [int(pid) for pid in run("ip", "netns", "pids", self.name).split()]

    @contextmanager
    def inside(self) -> Iterator[None]:
        """Sockets this thread creates meanwhile belong to the namespace (and stay there afterwards)."""
        with open("/proc/thread-self/ns/net") as home, open(f"/run/netns/{self.name}") as target:
            _setns(target.fileno())
            try:
                yield
            finally:
                _setns(home.fileno())
