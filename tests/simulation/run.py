"""One schedule end to end, and the command that explores many: ``python -m tests.simulation``.

    python -m tests.simulation --seed 1234          # one schedule: its faults, what broke, exit 1 if anything
    python -m tests.simulation --schedules 500      # seeds 0..499 (--first-seed to start elsewhere)
    python -m tests.simulation --minutes 10         # a campaign: fresh seeds until the time is up

A failing seed prints its schedule and what the checker found; the same seed
replays the same run exactly (one thread, one seeded generator, a virtual
clock).  The figures at the end: schedules run, virtual time covered, faults
injected, and the worst stall of a message confirmed after the faults ended.
"""
from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from dataclasses import dataclass

from tests.simulation import checker, faults
from tests.simulation.world import SimClient, World

PUBLISH_EVERY = 0.1  # seconds between two messages of one publisher
PUBLISH_TIMEOUT = 4.0  # a publish unconfirmed this long is given up (the client's error)
PROBE_BEFORE_END = 2.5  # the last message goes out this long before the check
# after the quiet time, the run goes on until the probe has been confirmed for STALL_BOUND, at most this long: a
# stand-down makes keepalived's check fail, and its rise (2 s) can come twice before a host is elected again
LATE_TAKEOVER = 6.0


@dataclass(frozen=True)
class Outcome:
    schedule: faults.Schedule
    problems: list[str]
    virtual_seconds: float
    faults: int
    kinds: Counter[str]  # the faults injected, by kind
    messages: int
    worst_stall: float


def run(seed: int) -> Outcome:
    schedule = faults.draw(seed)
    world = World(seed, sync=schedule.sync)
    publishers = [SimClient(world, f"publisher {n}", 5000 + n, subscribe=False, journal=False) for n in (1, 2)]
    SimClient(world, "subscriber", 6001, subscribe=True, journal=False)
    SimClient(world, "journal", 6002, subscribe=True, journal=True)
    probe_at = schedule.end - PROBE_BEFORE_END
    count = 0
    for index, publisher in enumerate(publishers):
        at = 0.6 + index * PUBLISH_EVERY / 2
        while at < probe_at:
            count += 1
            payload = b"%s #%d" % (publisher.name.encode(), count)
            world.at(at, lambda p=publisher, d=payload: p.publish(d, PUBLISH_TIMEOUT))
            at += PUBLISH_EVERY
    probe = b"probe"
    world.at(probe_at, lambda: publishers[0].publish(probe, PUBLISH_TIMEOUT))
    faults.apply(schedule, world)
    world.run_until(schedule.end)
    history = world.history
    while world.now < schedule.end + LATE_TAKEOVER:  # keepalived elected late: the probe's way is watched too
        confirmed = history.confirm_times.get(probe)
        if confirmed is not None and world.now >= confirmed + checker.STALL_BOUND + 0.1:
            break
        world.run_until(world.now + 0.5)
    problems = checker.check(history, sync=schedule.sync, probe=probe, healed=schedule.heal, end=world.now)
    injected = world.faults_injected
    return Outcome(schedule, problems, world.now, injected.total(), injected, count + 1,
                   checker.worst_stall(world.history, schedule.heal))


def report(outcome: Outcome) -> str:
    lines = [str(outcome.schedule)]
    lines += [f"  VIOLATION {problem}" for problem in outcome.problems[:20]]
    if len(outcome.problems) > 20:
        lines.append(f"  ... and {len(outcome.problems) - 20} more")
    return "\n".join(lines)


def explore(seeds: range | None, minutes: float | None, first_seed: int, out=sys.stdout) -> int:
    """Run schedules (the given seeds, or fresh ones for ``minutes``); print the failing ones and the figures."""
    started = time.monotonic()
    failed, runs, virtual, worst = [], 0, 0.0, 0.0
    injected: Counter[str] = Counter()
    seed = first_seed
    while True:
        if seeds is not None:
            if runs >= len(seeds):
                break
            seed = seeds[runs]
        elif minutes is not None and time.monotonic() - started >= minutes * 60:
            break
        outcome = run(seed)
        runs += 1
        seed += 1
        virtual += outcome.virtual_seconds
        injected += outcome.kinds
        if not outcome.problems:
            worst = max(worst, outcome.worst_stall)
        else:
            failed.append(outcome.schedule.seed)
            print(report(outcome), file=out, flush=True)
    elapsed = time.monotonic() - started
    kinds = ", ".join(f"{kind} {injected[kind]}" for kind in faults.KINDS)
    print(f"{runs} schedules in {elapsed:.1f} s ({runs / elapsed * 60:.0f}/min), {virtual:.0f} s of virtual time, "
          f"{injected.total()} faults injected ({kinds}), worst stall after the faults (schedules that held) {worst * 1000:.0f} ms, "
          f"{len(failed)} failed{': seeds ' + ' '.join(map(str, failed)) if failed else ''}", file=out, flush=True)
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.simulation", description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, help="run this one schedule and print it")
    parser.add_argument("--schedules", type=int, help="run this many schedules, seeds from --first-seed on")
    parser.add_argument("--minutes", type=float, help="run fresh schedules for this long")
    parser.add_argument("--first-seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.seed is not None:
        outcome = run(args.seed)
        print(report(outcome))
        print(f"{'FAILED' if outcome.problems else 'held'}: {outcome.messages} messages, {outcome.faults} faults, "
              f"worst stall after the faults {outcome.worst_stall * 1000:.0f} ms")
        return 1 if outcome.problems else 0
    if args.schedules is not None:
        if args.schedules < 1:
            parser.error("--schedules must be at least 1")
        return explore(range(args.first_seed, args.first_seed + args.schedules), None, args.first_seed)
    if args.minutes is not None:
        if args.minutes <= 0:
            parser.error("--minutes must be more than 0")
        return explore(None, args.minutes, args.first_seed)
    parser.error("give --seed, --schedules or --minutes")
    return 2
