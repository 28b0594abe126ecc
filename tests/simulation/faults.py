"""The seeded fault scheduler: any fault, on any host or link, in any order and combination.

A schedule is drawn from the seed alone, printed one fault a line, and
applied to a :class:`~tests.simulation.world.World` as events; at ``heal``
every fault still in force ends (links clean, hosts resumed, dead backbones
restarted with their state directory), so what follows is the liveness
check's quiet time.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

from fyrehose.backbone.pair.member import Role
from tests.simulation.world import HOSTS, Disk, Host, LinkRule, World

KINDS = ("kill", "pause host", "stop backbone", "partition", "degrade", "signal", "demote then promote",
         "clock jump")
LINKS = (("a", "b"), ("a", "c"), ("b", "c"))  # c: the clients' side
# Cut for longer, the hosts' link makes both hosts VRRP masters while clients reach both: two members without a
# third vote cannot keep numbers apart then (docs/operations.md, the failure table).  Cut one way only, it does
# too: the host that hears no adverts becomes master, and the other, hearing a lower priority, stays master.  So
# schedules cut it, either way, for less than VRRP's master-down interval (3 adverts and the skew, counted from
# the last advert heard), and lose at most 5 % on it.
SPLIT_LIMIT = 0.2
FAULTS_FROM = 1.5  # seconds: the pair has settled (a primary, its standby attached)


@dataclass(frozen=True)
class Fault:
    at: float
    kind: str
    host: str = ""
    link: tuple[str, str] = ("", "")
    both_ways: bool = True
    seconds: float = 0.0
    state_kept: bool = True
    loss: float = 0.0
    duplicate: float = 0.0
    jitter: float = 0.0
    delay: float = 0.0

    def __str__(self) -> str:
        where = self.host or f"{self.link[0]}{'<->' if self.both_ways else '->'}{self.link[1]}"
        text = f"{self.at:7.3f}s  {self.kind:<20} {where}"
        if self.seconds:
            text += f"  for {self.seconds:.3f}s"
        if self.kind == "kill":
            text += "  state " + ("kept" if self.state_kept else "lost")
        if self.kind == "degrade":
            text += f"  loss {self.loss:.0%} duplicate {self.duplicate:.0%} jitter {self.jitter * 1000:.1f}ms " \
                    f"delay {self.delay * 1000:.1f}ms"
        if self.kind == "signal":
            text += "  SIGUSR1 (promote)" if self.state_kept else "  SIGUSR2 (demote)"
        return text


@dataclass(frozen=True)
class Schedule:
    seed: int
    sync: bool
    faults: list[Fault]
    heal: float  # every fault ends here
    end: float

    def __str__(self) -> str:
        lines = [f"seed {self.seed}: {'sync' if self.sync else 'async'} pair, {len(self.faults)} faults, "
                 f"healed at {self.heal:.3f}s, checked at {self.end:.3f}s"]
        return "\n".join(lines + [f"  {fault}" for fault in self.faults])


def draw(seed: int) -> Schedule:
    """The schedule of ``seed``: its mode, 1 to 8 faults over up to 5 s, their kinds, targets and lengths."""
    rng = random.Random(seed)
    sync = rng.random() < 0.5
    window = rng.uniform(0.2, 5.0)
    faults = []
    for _ in range(rng.randint(1, 8)):
        kind = rng.choice(KINDS)
        at = FAULTS_FROM + rng.uniform(0, window)
        host = rng.choice(HOSTS)
        length = rng.choice((rng.uniform(0.005, 0.3), rng.uniform(0.3, 1.5), rng.uniform(1.5, 4.0)))
        if kind == "kill":
            faults.append(Fault(at, kind, host=host, seconds=length, state_kept=rng.random() < 0.8))
        elif kind in ("pause host", "stop backbone"):
            faults.append(Fault(at, kind, host=host, seconds=length))
        elif kind in ("partition", "degrade"):
            link = rng.choice(LINKS)
            if rng.random() < 0.5:
                link = (link[1], link[0])
            both = rng.random() < 0.5
            hosts_link = set(link) == {"a", "b"}
            if hosts_link:  # VRRP would make both hosts master: the pair's documented limit
                length = min(length, SPLIT_LIMIT)
            if kind == "partition":
                faults.append(Fault(at, kind, link=link, both_ways=both, seconds=length))
            else:
                faults.append(Fault(at, kind, link=link, both_ways=both, seconds=length,
                                    loss=rng.choice((0.0, 0.05) if hosts_link else
                                                    (0.0, 0.05, 0.3)), duplicate=rng.choice((0.0, 0.1)),
                                    jitter=rng.choice((0.0, 0.002, 0.02)), delay=rng.choice((0.0, 0.001, 0.05))))
        elif kind == "signal":
            faults.append(Fault(at, kind, host=host, state_kept=rng.random() < 0.5))
        elif kind == "demote then promote":
            faults.append(Fault(at, kind, host=host, seconds=rng.choice((0.0, rng.uniform(0.001, 0.3)))))
        else:
            faults.append(Fault(at, kind, host=host, seconds=rng.choice((0.1, rng.uniform(0.5, 3.0)))))
    faults.sort(key=lambda fault: fault.at)
    heal = max(fault.at + (fault.seconds if fault.kind != "clock jump" else 0.0) for fault in faults) + 0.01
    return Schedule(seed, sync, faults, heal, heal + QUIET)


QUIET = 6.0  # after the heal: keepalived settles (rise 2 s), then the probe goes out and is checked


def apply(schedule: Schedule, world: World) -> None:
    for fault in schedule.faults:
        world.at(fault.at, lambda fault=fault: _start(world, fault))
    world.at(schedule.heal, lambda: heal(world))


def _rules(fault: Fault) -> list[tuple[str, str]]:
    x, y = fault.link
    return [(x, y), (y, x)] if fault.both_ways else [(x, y)]


def _start(world: World, fault: Fault) -> None:
    world.faults_injected[fault.kind] += 1
    host = world.hosts.get(fault.host)
    end = fault.at + fault.seconds
    if fault.kind == "kill" and host is not None:
        host.kill()
        world.at(end, lambda: _restart(world, host, fault.state_kept))
    elif fault.kind == "pause host" and host is not None:
        host.pause(fault.seconds)
    elif fault.kind == "stop backbone" and host is not None:
        host.stopped = True
        world.at(end, host.resume_backbone)
    elif fault.kind in ("partition", "degrade"):
        for direction in _rules(fault):
            rule = world.links[direction]
            if fault.kind == "partition":
                rule.cut = True
            else:
                rule.loss, rule.duplicate = fault.loss, fault.duplicate
                rule.jitter, rule.delay = fault.jitter, max(rule.delay, fault.delay)
            world.at(end, lambda direction=direction: world.links.__setitem__(direction, LinkRule()))
    elif fault.kind == "signal" and host is not None:
        host.signal(Role.PRIMARY if fault.state_kept else Role.STANDBY)
    elif fault.kind == "demote then promote" and host is not None:
        host.signal(Role.STANDBY)
        world.at(fault.at + fault.seconds, lambda: host.signal(Role.PRIMARY))
    elif fault.kind == "clock jump" and host is not None:
        host.clock_offset += fault.seconds
        if host.process is not None:
            host.process.wake()


def _restart(world: World, host: Host, state_kept: bool) -> None:
    """The backbone starts again; its state directory is lost only while the peer follows the stream and knows
    every epoch this host led, from which it learns what it lost (lost while the peer knows nothing either, or
    after this host led an epoch the peer never heard of, is beyond any pair: that epoch was on no other disk;
    kept then)."""
    if host.process is not None:
        return
    peer = world.hosts[host.peer]
    if not state_kept and peer.follows_the_stream and peer.knows_epoch(host.disk.epoch):
        host.disk = Disk()
    host.start_process()


def heal(world: World) -> None:
    """Every fault ends: clean links, hosts running, every backbone up (state directories as they are)."""
    for direction in world.links:
        world.links[direction] = LinkRule()
    for host in world.hosts.values():
        if host.frozen:
            host.paused_until = world.now
            host.resume()
        if host.stopped:
            host.resume_backbone()
        if host.process is None:
            host.start_process()
