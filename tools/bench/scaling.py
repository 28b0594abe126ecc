"""Scaling on paper: the multi-process backbone's CPU per message and stage, and what more cores would carry.

From one measured step of the pipeline (``fyrehose`` target) at its highest
sustained rate, each stage's CPU time per message: the receive workers' and
the sequencer's per message in, the fan-out workers' per message *copy* (one
per subscriber).  These are the figures the backbone itself exports as
``fyrehose_process_cpu_seconds_total`` by process, over ``fyrehose_pushes_total``
and ``fyrehose_delivered_total``.

The projection for C cores gives the sequencer one core and splits the other
C - 1 between R receive and F fan-out workers; messages in per second are
then limited by the slowest stage::

    min(R / receive_us, 1 / sequence_us, F / (fanout_us * subscribers))   (x 1e6)

It reports the best split and the split ``--workers auto`` picks.  What it
leaves out, and what a real host therefore adds: the kernel's per-datagram
work (charged to no process: softirq), memory bandwidth, the wake-ups between
stages, and publishers or subscribers too few to spread over all workers
(the kernel hashes a publisher's 4-tuple to one receive worker).  It is an
upper bound to check a bigger host against, not a measurement of one.
"""
from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from typing import TextIO

from fyrehose.backbone.multiprocess.supervisor import default_sizes

CORES = (8, 16, 32)
SUBSCRIBERS = (4, 16, 64, 256)
_STAGES = {"receive": "fh-receiver-", "sequence": "fh-sequencer", "fanout": "fh-fanout-"}


@dataclass(frozen=True)
class StageCosts:
    """CPU microseconds per message in (receive, sequence) and per message copy out (fanout)."""

    receive_us: float
    sequence_us: float
    fanout_us: float


@dataclass(frozen=True)
class Projection:
    cores: int
    subscribers: int
    receive_workers: int
    fanout_workers: int
    msgs_per_s: float  # messages in per second (and delivered to each subscriber)
    bottleneck: str
    layout: str  # "best" or "auto"


def stage_costs(cpu_percent: dict[str, float], delivered_per_sub: float, subscribers: int) -> StageCosts | None:
    """Per-stage costs from each server process's CPU (% of one core) at ``delivered_per_sub`` msgs/s.

    None when a stage's process is missing (not the pipeline) or nothing was delivered.
    """
    if delivered_per_sub <= 0 or subscribers < 1:
        return None
    shares = {stage: sum(share for name, share in cpu_percent.items() if name.startswith(f"server/{prefix}"))
              for stage, prefix in _STAGES.items()}
    if not all(shares.values()):
        return None
    per_message = 1e4 / delivered_per_sub  # 1 % of a core for a second is 10,000 us
    return StageCosts(shares["receive"] * per_message, shares["sequence"] * per_message,
                      shares["fanout"] * per_message / subscribers)


def _rate(costs: StageCosts, receive: int, fanout: int, subscribers: int) -> tuple[float, str]:
    limits = {
        "receive": receive / costs.receive_us,
        "sequence": 1 / costs.sequence_us,
        "fanout": fanout / (costs.fanout_us * subscribers),
    }
    stage = min(limits, key=lambda name: limits[name])
    return limits[stage] * 1e6, stage


def project(costs: StageCosts, cores: int, subscribers: int) -> list[Projection]:
    """The best split of ``cores`` and the split ``--workers auto`` picks (both with one sequencer core)."""
    spare = cores - 1
    if spare < 2:
        raise ValueError("the pipeline needs 3 cores to split: a sequencer, a receive and a fan-out worker")
    # the highest rate; among equals (a sequencer-bound rate), the split with the most headroom elsewhere
    best = max(((receive, spare - receive) for receive in range(1, spare)),
               key=lambda split: (_rate(costs, split[0], split[1], subscribers)[0],
                                  min(split[0] / costs.receive_us, split[1] / (costs.fanout_us * subscribers))))
    out = []
    for layout, (receive, fanout) in (("best", best), ("auto", default_sizes(cores))):
        rate, bottleneck = _rate(costs, receive, fanout, subscribers)
        out.append(Projection(cores, subscribers, receive, fanout, rate, bottleneck, layout))
    return out


def scaling_record(steps: list[tuple[dict[str, float], float]], subscribers: int, cores: int) -> dict | None:
    """The ``scaling`` section of the bench's document from the pipeline's (CPU %, delivered/s) of each round.

    Each stage's cost is the median over the rounds; None when no round was the pipeline's.
    """
    measured = [costs for cpu, delivered in steps if (costs := stage_costs(cpu, delivered, subscribers))]
    if not measured:
        return None
    costs = StageCosts(*(statistics.median(getattr(one, name) for one in measured) for name in
                         ("receive_us", "sequence_us", "fanout_us")))
    delivered = statistics.median(delivered for _, delivered in steps)
    ceiling = cores * 1e6 / (costs.receive_us + costs.sequence_us + costs.fanout_us * subscribers)
    return {
        "stage_costs_us": asdict(costs),
        "measured": {"cores": cores, "subscribers": subscribers, "msgs_per_s": delivered,
                     "cpu_bound_ceiling_per_s": ceiling},
        "projections": [asdict(projection) for c in CORES for s in SUBSCRIBERS for projection in project(costs, c, s)],
    }


def write_table(record: dict, out: TextIO) -> None:
    costs, measured = record["stage_costs_us"], record["measured"]
    out.write(f"scaling on paper (fyrehose, the pipeline): CPU per message {costs['receive_us']:.2f} us receive, "
              f"{costs['sequence_us']:.2f} us sequence, {costs['fanout_us']:.2f} us fan-out per subscriber; "
              f"measured here {measured['msgs_per_s']:,.0f} msgs/s per subscriber on {measured['cores']} cores with "
              f"{measured['subscribers']} subscribers (CPU-bound ceiling "
              f"{measured['cpu_bound_ceiling_per_s']:,.0f})\n")
    rows: dict[tuple[int, int], dict[str, dict]] = {(p["cores"], p["subscribers"]): {} for p in record["projections"]}
    for projection in record["projections"]:
        rows[(projection["cores"], projection["subscribers"])][projection["layout"]] = projection
    out.write("cores  subscribers  best R/F  best msgs/s  bottleneck  auto R/F  auto msgs/s\n")
    for (cores, subscribers), layouts in rows.items():
        best, auto = layouts["best"], layouts["auto"]
        out.write(f"{cores:>5}  {subscribers:>11}  {best['receive_workers']:>4}/{best['fanout_workers']:<3}  "
                  f"{best['msgs_per_s']:>11,.0f}  {best['bottleneck']:>10}  {auto['receive_workers']:>4}/"
                  f"{auto['fanout_workers']:<3}  {auto['msgs_per_s']:>11,.0f}\n")
