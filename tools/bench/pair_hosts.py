"""Two backbone hosts and a client host on one switch, in network namespaces: where a standby pair is tried out.

The pair's takeover tests and ``fyrehose bench failover`` need the same small
network: hosts ``a`` and ``b`` (one backbone each, keepalived moving the
service address between them) and a ``client`` host, each a namespace with one
interface ``eth0``, all on a bridge that lives in a fourth namespace (the
switch, so that cutting a host's link leaves the others connected).  Nothing
touches the host's own namespace.  Each instance takes a /24 of 10.231.0.0/16
of its own, from the pid: ``.1`` is host a, ``.2`` host b, ``.3`` the client,
``.100`` the service address (VIP).

:class:`PairHosts` starts processes inside a host (:meth:`~PairHosts.start`,
:meth:`~PairHosts.keepalived`), injects faults (a cut link, random loss, a
stopped process) and tells which host holds the VIP.  Leaving the ``with``
block, even on an error, stops every process it started (by PID; SIGCONT first
for a paused one), then every process still inside its namespaces (keepalived's
children and scripts), and deletes the namespaces.

Processes start through ``ip netns exec``, which execs the command (its PID is
the command's own) after giving it the namespace's view of ``/sys`` too.
Entering the namespace in the parent thread (``setns`` before a
``posix_spawn``) saves the start of ``ip``, which is little next to a Python
process's own start, and leaves the child with the host's ``/sys``, where any
tool that lists interfaces there would see the wrong ones.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Sequence
from ipaddress import IPv4Address, IPv4Interface, IPv4Network
from pathlib import Path, PurePosixPath

from fyrehose.errors import CommandFailed
from fyrehose.runtime.process import ChildProcess, wait_until
from fyrehose.tools.bench import netns
from fyrehose.tools.deploy.files import write_scripts
from fyrehose.tools.deploy.keepalived import DEFAULT_ADVERT_INT, DEFAULT_ROUTER_ID, KeepalivedHost, render_config

HOSTS = ("a", "b", "client")
PAIR = ("a", "b")
INTERFACE = "eth0"
BRIDGE = "br0"
VIP_HOST = 100  # the service address's last octet
PRIORITIES = {"a": 150, "b": 100}  # a takes the address when both start together


def unavailable() -> str | None:
    """Why :class:`PairHosts` cannot run here (root, iproute2, nftables, keepalived), or None."""
    return netns.namespaces_available("nft", "keepalived")


class SplitBrain(CommandFailed):
    """Both backbone hosts hold the service address at once."""


class PairHosts:
    """The pair's network, from ``__enter__`` to ``__exit__``.  ``workdir`` holds logs, configs and scripts.

    ``workdir`` is created if missing; without one a temporary directory is made and removed at the end.
    keepalived runs only root-owned scripts that no one else can change, so a
    given ``workdir`` must lie under directories only root can write to
    (pytest's ``tmp_path`` does; sticky ones like /tmp are fine).
    """

    def __init__(self, workdir: Path | None = None) -> None:
        self.tag = netns.unique_name("fyrehose-pair")
        octet = (os.getpid() + int(self.tag.rsplit("-", 1)[1])) % 254 + 1
        self.subnet = IPv4Network(f"10.231.{octet}.0/24")
        self.vip = IPv4Interface(f"10.231.{octet}.{VIP_HOST}/24")
        self.switch = netns.Namespace(name=f"{self.tag}-switch")
        self.hosts = {host: netns.Namespace(name=f"{self.tag}-{host}") for host in HOSTS}
        self._own_workdir = workdir is None
        self.workdir = Path(tempfile.mkdtemp(prefix=f"{self.tag}-")) if workdir is None else Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._children: dict[int, ChildProcess] = {}
        self._paused: set[int] = set()
        self._entered: list[netns.Namespace] = []
        self._loss: set[str] = set()

    def address(self, host: str) -> IPv4Address:
        """Host ``a``, ``b`` or ``client``'s own address on ``eth0``."""
        return self.subnet.network_address + HOSTS.index(host) + 1

    def __enter__(self) -> PairHosts:
        try:
            for namespace in (self.switch, *self.hosts.values()):
                namespace.__enter__()
                self._entered.append(namespace)
            self._ip_switch("link", "add", BRIDGE, "type", "bridge", "forward_delay", "0")
            self._ip_switch("link", "set", BRIDGE, "up")
            for host, namespace in self.hosts.items():
                port = _port(host)
                self._ip_switch("link", "add", port, "type", "veth", "peer", "name", INTERFACE, "netns", namespace.name)
                self._ip_switch("link", "set", port, "master", BRIDGE, "up")
                netns.run("ip", "-n", namespace.name, "addr", "add", f"{self.address(host)}/{self.subnet.prefixlen}",
                          "dev", INTERFACE)
                netns.run("ip", "-n", namespace.name, "link", "set", INTERFACE, "up")
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        for pid in list(self._paused):
            self.resume(pid)
        for child in reversed(self._children.values()):
            child.stop(5)
        for namespace in reversed(self._entered):
            for pid in _pids(namespace):
                _kill(pid, signal.SIGKILL)
            namespace.__exit__()
        self._entered.clear()
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    # processes

    def start(self, host: str, argv: Sequence[str], *, log: Path | None = None,
              env: dict[str, str] | None = None) -> subprocess.Popen:
        """Run ``argv`` inside ``host``, stdout and stderr to ``log`` (default: a file in the workdir)."""
        if log is None:
            log = self.workdir / f"{host}-{Path(argv[0]).name}-{len(self._children)}.log"
        child = ChildProcess(self.hosts[host].prefix + list(argv), log, env=env)
        self._children[child.pid] = child
        return child.proc

    def log(self, proc: subprocess.Popen) -> Path:
        """Where a process :meth:`start` started writes its output."""
        return self._children[proc.pid].log

    def wait_ready(self, proc: subprocess.Popen, timeout: float = 30.0) -> tuple[str, int]:
        """HOST:PORT of a fyrehose command's readiness line (docs/operations.md, The readiness line)."""
        return self._children[proc.pid].wait_ready(timeout)

    def stop(self, proc: subprocess.Popen, timeout: float = 5.0) -> int | None:
        """SIGTERM (after SIGCONT if paused), SIGKILL after ``timeout`` s; the exit status."""
        self.resume(proc.pid)
        return self._children[proc.pid].stop(timeout)

    def keepalived_config(self, host: str, state_dir: Path, *, priority: int | None = None,
                          router_id: int = DEFAULT_ROUTER_ID, advert_int: float = DEFAULT_ADVERT_INT,
                          auth_pass: str | None = None) -> str:
        """keepalived.conf for backbone host ``a`` or ``b`` watching the backbone in ``state_dir``.

        Rendered as ``fyrehose keepalived`` renders it (priority 150 on a, 100
        on b unless given), with its scripts written into the workdir.
        """
        peer = PAIR[1 - PAIR.index(host)]
        member = KeepalivedHost(vip=self.vip, interface=INTERFACE, src=self.address(host), peer=self.address(peer),
                            priority=PRIORITIES[host] if priority is None else priority,
                            state_dir=PurePosixPath(state_dir),
                            scripts_dir=PurePosixPath(self.workdir / f"keepalived-scripts-{host}"),
                            router_id=router_id, advert_int=advert_int, auth_pass=auth_pass)
        write_scripts(member)
        return render_config(member)

    def keepalived(self, host: str, config_text: str) -> subprocess.Popen:
        """keepalived (VRRP only, not forking, logging to its log file) inside ``host`` with this configuration."""
        directory = self.workdir / f"keepalived-{host}-{len(self._children)}"
        directory.mkdir(mode=0o700)
        config = directory / "keepalived.conf"
        config.write_text(config_text)
        argv = ["keepalived", "--vrrp", "--dont-fork", "--log-console", "--log-detail", "--no-syslog",
                "--use-file", str(config), "--pid", str(directory / "keepalived.pid"),
                "--vrrp_pid", str(directory / "vrrp.pid")]
        return self.start(host, argv, log=directory / "keepalived.log")

    # faults

    def link_down(self, host: str) -> None:
        """Cut ``host``'s cable: its switch port goes down (and its ``eth0`` loses carrier)."""
        self._ip_switch("link", "set", _port(host), "down")

    def link_up(self, host: str) -> None:
        self._ip_switch("link", "set", _port(host), "up")

    def netem(self, host: str, loss_percent: float) -> None:
        """Lose ``loss_percent`` of the packets on ``host``'s link, each way, at random (0: no more loss).

        The switch drops them (nftables' random numbers in the bridge), as a bad
        cable would: the host's own sockets see nothing, where a drop on the host
        would fail its ``sendto``.  Not tc's netem qdisc, which not every kernel has.
        """
        if not 0 <= loss_percent <= 100:
            raise ValueError(f"loss_percent {loss_percent} is outside 0-100")
        table = f"fyrehose_loss_{host}"
        if host in self._loss:
            netns.run(*self.switch.prefix, "nft", "delete", "table", "bridge", table)
            self._loss.discard(host)
        if loss_percent == 0:
            return
        threshold = round(loss_percent * 100)  # out of 10,000
        chance = "" if threshold == 10_000 else f"numgen random mod 10000 < {threshold} "
        port = _port(host)
        netns.run(*self.switch.prefix, "nft", "-f", "-", stdin=(
            f"table bridge {table} {{\n"
            "  chain forward {\n"
            "    type filter hook forward priority 0; policy accept;\n"
            f'    iifname "{port}" {chance}drop\n'
            f'    oifname "{port}" {chance}drop\n'
            "  }\n"
            "}\n"))
        self._loss.add(host)

    def pause(self, pid: int) -> None:
        """SIGSTOP: the process is still there, in state T, and does nothing."""
        os.kill(pid, signal.SIGSTOP)
        self._paused.add(pid)

    def resume(self, pid: int) -> None:
        """SIGCONT a process :meth:`pause` stopped."""
        if pid in self._paused:
            self._paused.discard(pid)
            _kill(pid, signal.SIGCONT)

    # the service address

    def vip_holders(self) -> tuple[str, ...]:
        """The backbone hosts that have the VIP on their ``eth0`` now (two: split brain)."""
        return tuple(host for host in PAIR if f" {self.vip.ip}/" in netns.run(
            "ip", "-n", self.hosts[host].name, "-o", "-4", "addr", "show", "dev", INTERFACE))

    def vip_holder(self) -> str | None:
        """The one host that holds the VIP, or None; :class:`SplitBrain` if both do."""
        holders = self.vip_holders()
        if len(holders) > 1:
            raise SplitBrain(f"both {' and '.join(holders)} hold {self.vip.ip}")
        return holders[0] if holders else None

    def wait_for_holder(self, host: str | None, timeout: float = 10.0) -> float:
        """Wait until ``host`` (None: nobody) alone holds the VIP; the seconds it took.  TimeoutError after ``timeout``."""
        started = time.monotonic()
        wait_until(lambda: self.vip_holders() == ((host,) if host else ()), timeout,
                   f"{host or 'nobody'} holding {self.vip.ip}", interval=0.01)
        return time.monotonic() - started

    def _ip_switch(self, *arguments: str) -> None:
        netns.run("ip", "-n", self.switch.name, *arguments)


def _port(host: str) -> str:
    """The switch's port to ``host``."""
    return f"to-{host}"


def _pids(namespace: netns.Namespace) -> list[int]:
    try:
        return namespace.pids()
    except CommandFailed:  # the namespace was never made
        return []


def _kill(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass
