"""``fyrehose bench failover``: takeovers of a standby pair, in namespaces it builds, seen from a subscriber.

Two backbone hosts (a and b, keepalived moving the service address between
them) and a client host (:mod:`fyrehose.tools.bench.pair_hosts`).  The client
host runs :mod:`fyrehose.tools.bench.failover_client`: first the cost of the
standby (the primary's CPU per message at one offered rate, confirmed
throughput and CONFIRM latency with the standby attached, then with it
stopped, in the same run; ``--cost`` measures only this), then a confirmed publisher at
``--rate`` and a subscriber while the orchestrator kills the primary backbone
``--runs`` times, alternating the hosts: after each kill it waits for the
other host to hold the address and be primary, starts the killed backbone
again as standby and waits until it has caught up.

Per run and as min/median/max: the takeover time (the longest silence in the
subscriber's stream around the kill: the last message through the old primary
to the first through the new one), messages confirmed, confirmed but never
delivered, reported lost, never sent and duplicates (an index delivered
twice).  docs/benchmarks.md, "Failover", has the figures.
"""
from __future__ import annotations

import json
import os
import select
import signal
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from fyrehose.errors import CommandFailed
from fyrehose.runtime.process import wait_until
from fyrehose.tools.bench.failover_client import PACED_BATCH
from fyrehose.tools.bench.pair_hosts import PAIR, PairHosts, unavailable

SERVICE_PORT = 2323
PAIR_PORT = 2324
WINDOW_BEFORE = 0.5  # seconds before a kill in which the silence may begin
WINDOW_AFTER = 10.0  # and after it, in which it must end for the takeover to count as completed
COST_SECONDS = 2.0
COST_SAMPLES = 1000
COST_ROUNDS = 3
COST_RATE = 100_000.0  # msgs/s offered while the primary's CPU per message is measured: both arms sustain it
HEALTHY_AGAIN = 2.5  # a backbone back as standby: keepalived counts it healthy after two checks (rise 2)


class FailoverError(CommandFailed):
    pass


@dataclass
class FailoverSettings:
    runs: int
    rate: float
    sync: bool
    key: bool = False  # the members sign their pair datagrams (--pair-key)
    grace: float = 3.0
    cost_only: bool = False  # --cost: the standby's cost, no takeovers
    cost_rounds: int = COST_ROUNDS


@dataclass
class Takeover:
    killed: str
    killed_at: float
    took_over: str = ""
    address_moved_s: float = float("nan")
    stats: dict[str, Any] = field(default_factory=dict)


class Pair:
    """The two backbones of the pair and their keepalived, inside :class:`PairHosts`."""

    def __init__(self, net: PairHosts, workdir: Path, sync: bool, key: bool, metrics_port: int | None = None) -> None:
        self.net = net
        self.sync = sync
        self.metrics_port = metrics_port  # each backbone's --metrics on its host's own address, when given
        self.state = {host: workdir / f"state-{host}" for host in PAIR}
        self.backbones: dict[str, subprocess.Popen] = {}
        self.keepaliveds: dict[str, subprocess.Popen] = {}
        self.key: Path | None = None
        if key:
            self.key = workdir / "pair.key"
            self.key.write_bytes(os.urandom(32))
            self.key.chmod(0o600)
        for host in PAIR:
            self.state[host].mkdir(parents=True, exist_ok=True)
            self.start_backbone(host)
        for host in PAIR:
            self.start_keepalived(host)

    def start_keepalived(self, host: str) -> None:
        self.keepaliveds[host] = self.net.keepalived(host, self.net.keepalived_config(host, self.state[host]))

    def start_backbone(self, host: str) -> None:
        peer = PAIR[1 - PAIR.index(host)]
        net = self.net
        argv = [sys.executable, "-m", "fyrehose", "backbone", "--listen", f"{net.vip.ip}:{SERVICE_PORT}",
                "--pair", f"{net.address(host)}:{PAIR_PORT}", "--peer", f"{net.address(peer)}:{PAIR_PORT}",
                "--state-dir", str(self.state[host])] + (["--standby-sync"] if self.sync else []) + \
            (["--pair-key", str(self.key)] if self.key is not None else []) + \
            (["--metrics", f"{net.address(host)}:{self.metrics_port}"] if self.metrics_port is not None else [])
        proc = net.start(host, argv)
        net.wait_ready(proc, 30)
        self.backbones[host] = proc

    def role(self, host: str) -> str:
        try:
            return (self.state[host] / "role").read_text().strip()
        except FileNotFoundError:
            return ""

    def wait_role(self, host: str, role: str, timeout: float) -> None:
        wait_until(lambda: self.role(host) == role, timeout, f"the backbone on {host} to be {role}", interval=0.01)

    def primary_once_promoted(self, timeout: float) -> str:
        """The host holding the address, once its backbone is primary (read together: keepalived may move the
        address between two separate reads)."""
        def serving() -> str:
            holders = self.net.vip_holders()
            return holders[0] if len(holders) == 1 and self.role(holders[0]) == "primary" else ""
        return wait_until(serving, timeout, "the address holder's backbone to be primary", interval=0.01)

    def primary(self) -> str:
        holder = self.net.vip_holder()
        if holder is None or self.role(holder) != "primary":
            roles = ", ".join(f"{host}: {self.role(host) or '-'}" for host in PAIR)
            raise FailoverError(f"no primary holds the service address (holder {holder}, roles {roles})")
        return holder


class ClientHost:
    """The measuring client in the client namespace, driven line by line."""

    def __init__(self, net: PairHosts, rate: float, log: Path) -> None:
        argv = net.hosts["client"].prefix + [sys.executable, "-m", "fyrehose.tools.bench.failover_client",
                                             f"{net.vip.ip}:{SERVICE_PORT}", str(rate)]
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=log.open("w"), text=True)

    def ask(self, command: str, timeout: float = 120.0) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:  # a client that hangs is not waited for past the timeout
            if not select.select([self.proc.stdout], [], [], min(1.0, left))[0]:
                continue
            line = self.proc.stdout.readline()  # the answer is one whole line; empty once the client has died
            if not line:
                break
            answer: dict[str, Any] = json.loads(line)
            if "error" in answer:
                raise FailoverError(f"the measuring client: {answer['error']}")
            return answer
        raise FailoverError(f"the measuring client did not answer {command.split()[0]!r} "
                            f"(exit status {self.proc.poll()})")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)


@contextmanager
def pair_rig(workdir: Path, sync: bool, rate: float, key: bool = False) -> Iterator[tuple[Pair, ClientHost]]:
    """The pair serving (a primary, b its standby) and the measuring client on the client host."""
    reason = unavailable()
    if reason is not None:
        raise FailoverError(f"a standby pair in namespaces needs root and keepalived: {reason}")
    with PairHosts(workdir) as net:
        pair = Pair(net, workdir, sync, key)
        # a, with the higher priority, usually takes the address first; on a busy machine b may get there first
        wait_until(lambda: len(net.vip_holders()) == 1, 30, f"one host holding {net.vip.ip}", interval=0.05)
        first = pair.primary_once_promoted(10)
        pair.wait_role(PAIR[1 - PAIR.index(first)], "standby", 10)
        time.sleep(HEALTHY_AGAIN)
        client = ClientHost(net, rate, workdir / "client.log")
        try:
            yield pair, client
        finally:
            client.stop()


def run_failover(settings: FailoverSettings, workdir: Path, out: TextIO) -> dict[str, Any]:
    with pair_rig(workdir, settings.sync, settings.rate, settings.key) as (pair, client):
        cost = measure_cost(pair, client, out, settings.cost_rounds)
        if settings.cost_only:
            return {"mode": "sync" if settings.sync else "async", "pair_key": settings.key, "cost": cost}
        client.ask("stream")
        time.sleep(1.0)
        takeovers = [take_over(pair, out, run) for run in range(settings.runs)]
        time.sleep(1.0)
        record = client.ask(f"finish {settings.grace}", timeout=60 + settings.grace)
    return summarize(settings, cost, takeovers, record)


def measure_cost(pair: Pair, client: ClientHost, out: TextIO, rounds: int = COST_ROUNDS,
                 rate: float = COST_RATE) -> dict[str, Any]:
    """The standby's cost, alternated in ``rounds``: with the standby attached, then with it stopped (the primary
    alone), each time the primary backbone's own CPU per message at ``rate`` msgs/s offered (the same load in
    both), confirmed msgs/s through ``publish_many`` and the CONFIRM latency of ``publish``.  On one machine the
    standby also takes CPU from the primary and the client; the primary's CPU per message is what the standby
    costs the primary on hosts of its own."""
    phases: dict[str, list[dict[str, Any]]] = {"with_standby": [], "without_standby": []}
    for _ in range(rounds):
        phases["with_standby"].append(_cost_phase(pair, client, rate))
        standby = PAIR[1 - PAIR.index(pair.primary())]
        pair.net.stop(pair.backbones[standby])
        time.sleep(1.5)  # the primary detaches its silent standby after 1 s
        phases["without_standby"].append(_cost_phase(pair, client, rate))
        pair.start_backbone(standby)
        pair.wait_role(standby, "standby", 30)
        time.sleep(HEALTHY_AGAIN)
    ratios = {
        name: [with_[key] / alone[key] for with_, alone in zip(phases["with_standby"], phases["without_standby"])]
        for name, key in (("throughput_ratio", "throughput"), ("confirm_p50_ratio", "confirm_p50_ms"),
                          ("confirm_p99_ratio", "confirm_p99_ms"), ("primary_cpu_ratio", "primary_us_per_msg"),
                          ("primary_wakes_ratio", "primary_wakes_per_datagram"),
                          ("primary_cpu_at_most_ratio", "primary_us_per_msg_at_most"))}
    cost: dict[str, Any] = {**phases, **{name: _spread(values) for name, values in ratios.items()}}
    for name, values in phases.items():
        print(f"{name.replace('_', ' ')}: " + "; ".join(
            f"primary {phase['primary_us_per_msg']:.3f} us/msg, {phase['primary_wakes_per_datagram']:.2f} wakes "
            f"per datagram at {phase['paced_rate']:,.0f} msgs/s; "
            f"{phase['throughput']:,.0f} msgs/s (primary {phase['primary_us_per_msg_at_most']:.3f} us/msg), "
            f"CONFIRM p50 {phase['confirm_p50_ms']:.3f} p99 {phase['confirm_p99_ms']:.3f} ms" for phase in values),
            file=out)
    print("standby's cost, with / without, min / median / max over rounds: " + ", ".join(
        f"{name.removesuffix('_ratio').replace('_', ' ')} " + " / ".join(f"{value:.2f}" for value in spread.values())
        for name, spread in cost.items() if name.endswith("_ratio")), file=out, flush=True)
    return cost


def _cost_phase(pair: Pair, client: ClientHost, rate: float) -> dict[str, Any]:
    """The primary's CPU per message at ``rate`` offered (``primary_us_per_msg``), then throughput, CONFIRM
    latency and the CPU per message of that step (``primary_us_per_msg_at_most``: batches differ as the rates do)."""
    primary = pair.backbones[pair.primary()].pid

    def cpu_per_message(command: str) -> tuple[dict[str, Any], float, float]:
        """The answer, the primary's CPU us per message and its loop's wakes per datagram of PACED_BATCH."""
        cpu, wakes = cpu_seconds(primary), loop_wakes(primary)
        answer = client.ask(command)
        messages = max(1, answer["messages"])
        return (answer, (cpu_seconds(primary) - cpu) / messages * 1e6,
                (loop_wakes(primary) - wakes) / messages * PACED_BATCH)

    paced, paced_us, paced_wakes = cpu_per_message(f"paced {COST_SECONDS} {rate}")
    phase, at_most_us, _ = cpu_per_message(f"cost {COST_SECONDS} {COST_SAMPLES}")
    return {**phase, "primary_us_per_msg": paced_us, "paced_rate": paced["rate"],
            "primary_wakes_per_datagram": paced_wakes, "primary_us_per_msg_at_most": at_most_us}


def cpu_seconds(pid: int) -> float:
    """The CPU time of every thread of ``pid``, to the nanosecond (the scheduler's own count: the clock ticks of
    ``cpu_times`` are 10 ms, 5 % of a 2 s step at 100,000 msgs/s)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (FileNotFoundError, ProcessLookupError):  # a thread that ended meanwhile
            continue
    return total / 1e9


def loop_wakes(pid: int) -> int:
    """How often the main thread of ``pid`` (the backbone's loop) slept and was woken."""
    for line in Path(f"/proc/{pid}/task/{pid}/status").read_text().splitlines():
        if line.startswith("voluntary_ctxt_switches:"):
            return int(line.split()[1])
    raise FailoverError(f"no voluntary_ctxt_switches in the status of {pid}")


Fault = Callable[[Pair, str], Callable[[], None]]  # does something to the primary's host; returns how to heal it


def kill_backbone(pair: Pair, host: str) -> Callable[[], None]:
    """kill -9 of the primary backbone; healed by starting it again (as standby)."""
    os.kill(pair.backbones[host].pid, signal.SIGKILL)
    return lambda: None


def take_over(pair: Pair, out: TextIO, run: int, fault: Fault = kill_backbone) -> Takeover:
    """Do ``fault`` to the primary's host, wait for the other host to serve, heal the fault, and wait until the
    old primary's backbone (started again if it died) is a standby fit to take over in turn."""
    net = pair.net
    failed = pair.primary()
    other = PAIR[1 - PAIR.index(failed)]
    takeover = Takeover(failed, time.monotonic())
    heal = fault(pair, failed)
    try:
        takeover.address_moved_s = net.wait_for_holder(other, WINDOW_AFTER)
        pair.wait_role(other, "primary", WINDOW_AFTER)
        takeover.took_over = other
    except TimeoutError as exc:
        print(f"run {run + 1}: no takeover: {exc}", file=out, flush=True)
    heal()
    if pair.backbones[failed].poll() is not None:
        net.stop(pair.backbones[failed], 5)  # reaps it
        pair.start_backbone(failed)
    pair.wait_role(failed, "standby", 30)
    time.sleep(HEALTHY_AGAIN)
    return takeover


def summarize(settings: FailoverSettings, cost: dict[str, Any], takeovers: list[Takeover],
              record: dict[str, Any]) -> dict[str, Any]:
    published = record["published"]
    messages = [(seq, index, at) for kind, seq, index, at in record["events"] if kind == "m"]
    losses = [(kind, first, last, at) for kind, first, last, at in record["events"] if kind != "m"]
    arrivals = [at for _, _, at in messages]
    delivered = Counter(index for _, index, _ in messages)
    at_number = {seq: index for seq, index, _ in messages}
    reported = sorted((first, last) for _, first, last, _ in losses)
    bounds = [t.killed_at for t in takeovers] + [float("inf")]
    for number, takeover in enumerate(takeovers):
        low = takeover.killed_at if number else float("-inf")  # each run: from its kill to the next
        high = bounds[number + 1]
        mine = [(index, seq) for index, sent, seq in published if low <= sent < high]
        confirmed = [index for index, seq in mine if seq > 0]
        gap = _longest_silence(arrivals, takeover.killed_at, min(WINDOW_AFTER, high - takeover.killed_at))
        takeover.stats = {
            "killed": takeover.killed, "took_over": takeover.took_over or None,
            "completed": bool(takeover.took_over) and gap is not None,
            "takeover_ms": None if gap is None else gap * 1000,
            "address_moved_ms": takeover.address_moved_s * 1000,
            "confirmed": len(confirmed),
            "confirmed_lost": sum(1 for index in confirmed if not delivered[index]),
            "failed_publishes": sum(1 for _, seq in mine if seq < 0),
            "duplicates": sum(delivered[index] - 1 for index, _ in mine if delivered[index] > 1),
            "reported_lost": sum(last - first + 1 for kind, first, last, at in losses
                                 if low <= at < high and "never sent" not in kind),
            "never_sent": sum(last - first + 1 for kind, first, last, at in losses
                              if low <= at < high and "never sent" in kind),
        }
    per_run = [t.stats for t in takeovers]
    times = [run["takeover_ms"] for run in per_run if run["takeover_ms"] is not None]
    confirmed_all = [index for index, _, seq in published if seq > 0]
    numbers = [(index, seq) for index, _, seq in published if seq > 0]
    return {
        # a confirmed number that came with another message: a number issued twice
        "wrong_numbers": sum(1 for index, seq in numbers if seq in at_number and at_number[seq] != index),
        # confirmed, never delivered, and not inside any range the subscriber was told is lost
        "unreported_lost": sum(1 for index, seq in numbers if not delivered[index] and not _inside(seq, reported)),
        "mode": "sync" if settings.sync else "async", "rate": settings.rate, "pair_key": settings.key,
        "runs": settings.runs, "completed": sum(run["completed"] for run in per_run),
        "confirmed": len(confirmed_all),
        "confirmed_lost": sum(1 for index in confirmed_all if not delivered[index]),
        "duplicates": sum(count - 1 for count in delivered.values() if count > 1),
        "reported_lost": sum(last - first + 1 for kind, first, last, _ in losses if "never sent" not in kind),
        "never_sent": sum(last - first + 1 for kind, first, last, _ in losses if "never sent" in kind),
        "failed_publishes": sum(1 for _, _, seq in published if seq < 0),
        "takeover_ms": _spread(times),
        "cost": cost,
        "per_run": per_run,
    }


def _longest_silence(arrivals: list[float], killed_at: float, after: float) -> float | None:
    """The longest gap between consecutive arrivals that begins within WINDOW_BEFORE of the kill and ends within
    ``after`` s of it (None: the stream never resumed)."""
    window = [at for at in arrivals if killed_at - WINDOW_BEFORE <= at <= killed_at + after]
    before = [at for at in window if at <= killed_at]
    resumed = [at for at in window if at > killed_at]
    if not resumed:
        return None
    points = [before[-1] if before else killed_at] + resumed
    return max(b - a for a, b in zip(points, points[1:]))


def _inside(seq: int, ranges: list[tuple[int, int]]) -> bool:
    return any(first <= seq <= last for first, last in ranges)


def _spread(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"min": None, "median": None, "max": None}
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def write_table(doc: dict[str, Any], out: TextIO) -> None:
    print(f"\nfailover, {doc['mode']} standby{', signed pair datagrams' if doc['pair_key'] else ''}, "
          f"{doc['rate']:g} confirmed msgs/s offered, {doc['runs']} kills of the "
          f"primary backbone (kill -9), alternating hosts", file=out)
    print(f"{'run':>4} {'killed':>6} {'new':>4} {'takeover ms':>12} {'address ms':>11} {'confirmed':>10} "
          f"{'conf. lost':>10} {'rep. lost':>10} {'never sent':>10} {'dups':>5} {'failed':>6}", file=out)
    for number, run in enumerate(doc["per_run"], 1):
        takeover = "-" if run["takeover_ms"] is None else f"{run['takeover_ms']:.0f}"
        print(f"{number:>4} {run['killed']:>6} {run['took_over'] or '-':>4} {takeover:>12} "
              f"{run['address_moved_ms']:>11.0f} {run['confirmed']:>10} {run['confirmed_lost']:>10} "
              f"{run['reported_lost']:>10} {run['never_sent']:>10} {run['duplicates']:>5} "
              f"{run['failed_publishes']:>6}", file=out)
    spread = doc["takeover_ms"]
    shown = " / ".join("-" if spread[key] is None else f"{spread[key]:.0f}" for key in ("min", "median", "max"))
    print(f"takeovers completed {doc['completed']} of {doc['runs']}; takeover ms min / median / max: {shown}; "
          f"confirmed {doc['confirmed']}, confirmed but lost {doc['confirmed_lost']}, reported lost "
          f"{doc['reported_lost']}, never sent {doc['never_sent']}, duplicates {doc['duplicates']}, "
          f"publishes that raised {doc['failed_publishes']}; numbers issued twice {doc['wrong_numbers']}, "
          f"confirmed and lost silently {doc['unreported_lost']}", file=out, flush=True)
