"""keepalived with ``fyrehose keepalived``'s configuration moves the address between two hosts, for real.

Two backbone hosts of a :class:`PairHosts` (network namespaces on a bridge of
their own), keepalived in each, and a stand-in backbone per host
(tests/pair/standin_backbone.py) that keeps the pid and role files and records
the signals keepalived's scripts send it.  One host takes the address and is
told to promote; then the address moves away from the host whose backbone is
killed (kill -9), fenced (its role file says ``fenced``) or stopped (SIGSTOP,
state T), and the host that takes it is told to promote each time.  How long
each move took (from the fault to the SIGUSR1 the new primary got) is printed.
"""
from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest

from fyrehose.tools.bench import pair_hosts
from fyrehose.tools.bench.pair_hosts import PAIR, PairHosts

from support import wait_until

pytestmark = pytest.mark.skipif(pair_hosts.unavailable() is not None, reason=str(pair_hosts.unavailable()))

STANDIN = Path(__file__).with_name("standin_backbone.py")
WAIT = 20.0  # seconds any one step may take before the test fails


class Host:
    """One backbone host of the pair: its state directory and its current stand-in."""

    def __init__(self, pair: PairHosts, name: str, tmp_path: Path) -> None:
        self.pair, self.name = pair, name
        self.state_dir = tmp_path / f"state-{name}"
        self.state_dir.mkdir()
        self.standin = self.start_standin()

    def start_standin(self):
        (self.state_dir / "pid").unlink(missing_ok=True)
        process = self.pair.start(self.name, [sys.executable, str(STANDIN), str(self.state_dir)])
        wait_until(lambda: (self.state_dir / "pid").exists(), WAIT, f"the stand-in on {self.name}")
        return process

    def signals(self, name: str) -> list[float]:
        """When the stand-ins here got signal ``name`` (monotonic seconds)."""
        record = self.state_dir / "signals"
        lines = record.read_text().splitlines() if record.exists() else []
        return [float(line.split()[1]) for line in lines if line.split()[0] == name]

    def wait_for_signal(self, name: str, after: float) -> float:
        """The first ``name`` received after ``after``."""
        return wait_until(lambda: next((at for at in self.signals(name) if at > after), None), WAIT,
                          f"{name} to the backbone on {self.name}")

    def set_role(self, role: str) -> None:
        temporary = self.state_dir / ".role.test"
        temporary.write_text(f"{role}\n")
        os.replace(temporary, self.state_dir / "role")


def test_the_address_follows_the_healthy_backbone_and_its_new_host_is_promoted(tmp_path):
    with PairHosts(tmp_path / "pair") as pair:
        hosts = {name: Host(pair, name, tmp_path) for name in PAIR}
        started = time.monotonic()
        for host in hosts.values():
            pair.keepalived(host.name, pair.keepalived_config(host.name, host.state_dir))
        first = wait_until(pair.vip_holder, WAIT, "a host taking the address")
        master, other = hosts[first], hosts[PAIR[1 - PAIR.index(first)]]
        master.wait_for_signal("SIGUSR1", started)
        other.wait_for_signal("SIGUSR2", started)  # notify_backup: it stays standby
        assert not other.signals("SIGUSR1")

        # kill -9 of the primary: the other host takes the address and is promoted
        killed_at = time.monotonic()
        os.kill(master.standin.pid, signal.SIGKILL)
        pair.wait_for_holder(other.name, WAIT)
        took = other.wait_for_signal("SIGUSR1", killed_at) - killed_at
        print(f"kill -9: {other.name} promoted {took * 1000:.0f} ms after the primary's backbone died")

        # a new backbone on the first host: standby (notify_backup), and the address stays where it is (nopreempt)
        restarted_at = time.monotonic()
        master.standin = master.start_standin()
        master.wait_for_signal("SIGUSR2", restarted_at)
        assert pair.vip_holder() == other.name

        # the primary fenced: the address goes back to the first host, which is promoted
        fenced_at = time.monotonic()
        other.set_role("fenced")
        pair.wait_for_holder(master.name, WAIT)
        took = master.wait_for_signal("SIGUSR1", fenced_at) - fenced_at
        print(f"fenced: {master.name} promoted {took * 1000:.0f} ms after the primary's role said fenced")
        other.wait_for_signal("SIGUSR2", fenced_at)  # notify_fault

        # the fenced host rejoins as standby; then the primary is stopped (SIGSTOP, state T)
        rejoined_at = time.monotonic()
        other.set_role("standby")
        wait_until(lambda: len([at for at in other.signals("SIGUSR2") if at > rejoined_at]), WAIT,
                   f"{other.name} back in BACKUP (notify_backup)")
        stopped_at = time.monotonic()
        pair.pause(master.standin.pid)
        pair.wait_for_holder(other.name, WAIT)
        took = other.wait_for_signal("SIGUSR1", stopped_at) - stopped_at
        print(f"SIGSTOP: {other.name} promoted {took * 1000:.0f} ms after the primary's backbone stopped")
