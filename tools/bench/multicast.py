"""``fyrehose bench --multicast``: what sending each datagram once to a group saves the backbone.

For 4, 8 and 16 subscribers, in alternated rounds, the same step twice: a
backbone without a group and unicast subscribers, then a backbone with
``--multicast`` whose subscribers joined the group (KEEPALIVE flag
MULTICAST, DELIVERs read from the group's socket).  Each step is a step of
the main bench (fyrehose.tools.bench.orchestra: a fresh server, forked lean
load generators, the publishers as fast as they can or at ``--rate``), and
reports the backbone's CPU per message (all its processes, over the
publishing window, per message delivered to each subscriber) and the
msgs/s each subscriber got.

Multicast must never leave the bench: the command creates a network
namespace, runs itself inside it with ``ip netns exec`` (every server and
load generator it starts is inside too), and deletes the namespace at the
end.  The group is administratively scoped, TTL 1, routed on the namespace's
loopback with the interface set explicitly.

With the pipeline (``--workers`` 1 or more) it also turns each mode's CPU
into per-stage costs and projects the rate for 8-32 cores and 4-256
subscribers (fyrehose.tools.bench.scaling): unicast fan-out costs one copy
per subscriber, the group one copy in all, sent by fan-out worker 0 alone.
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TextIO

from fyrehose.backbone.multiprocess.supervisor import auto_workers
from fyrehose.net.group_socket import join_group
from fyrehose.protocol import codec
from fyrehose.protocol.connection import BackboneConnection
from fyrehose.tools.bench import netns, report, scaling
from fyrehose.tools.bench.loadgen import SOCKET_BUFFER, LoadSpec, _FyrehoseReceiver, subscriber_main
from fyrehose.tools.bench.orchestra import BenchSettings, StepResult, StepRunner
from fyrehose.tools.bench.servers import ServerProcess
from fyrehose.tools.bench.targets import FYREHOSE, BenchError, Target

NAMESPACE_ENV = "FYREHOSE_BENCH_NAMESPACE"  # set for the run inside the namespace the command created
GROUP = ("239.255.77.1", 23277)
SUBSCRIBER_COUNTS = (4, 8, 16)
MODES = ("unicast", "multicast")
GROUP_ARGUMENTS = ["--multicast", f"{GROUP[0]}:{GROUP[1]}", "--multicast-ttl", "1", "--multicast-interface", "127.0.0.1"]


class GroupReceiver(_FyrehoseReceiver):
    """A lean subscriber that joined the group: KEEPALIVEs (with MULTICAST) and their ACKs on its own
    socket, DELIVERs counted from the group's socket, and only the backbone's."""

    def __init__(self, spec: LoadSpec) -> None:
        self.joined = False
        super().__init__(spec)  # subscribed over unicast: the KEEPALIVE handshake
        assert self.sock is not None  # opened for that handshake
        self.unicast: socket.socket = self.sock
        self.unicast.setblocking(False)
        self.sock = join_group(GROUP, spec.address, SOCKET_BUFFER)
        # the same flags and MULTICAST, from a KEEPALIVE sent now on: no unicast DELIVERs from then on
        self.connection = BackboneConnection(spec.address, replace(self.connection.options, multicast=True))
        self.strangers = 0
        self.joined = True
        self.tick(time.monotonic())

    def tick(self, now: float) -> None:
        if not self.joined:
            super().tick(now)
            return
        for datagram in self.connection.handle_timers(now)[0]:
            self.unicast.sendto(datagram, self.spec.address)
        for _ in range(16):
            try:
                data, source = self.unicast.recvfrom(self.read_size)
            except BlockingIOError:
                return
            self.connection.receive(data, source, now)  # ACKs (a unicast DELIVER would be counted as such)

    def read(self) -> bytes | None:
        sock = self.sock
        assert sock is not None  # the group's, joined in __init__
        data, source = sock.recvfrom(self.read_size)
        if source == self.spec.address and data[:1] == bytes([codec.DELIVER]):
            return data
        self.strangers += 1
        return None

    def anomalies(self) -> dict[str, int]:
        counts = super().anomalies()
        counts["datagrams from strangers"] += self.strangers
        return counts

    def close(self) -> None:
        super().close()
        self.unicast.close()


class MulticastStepRunner(StepRunner):
    """A step of the main bench with or without the group; ``mode`` is set before each step."""

    def __init__(self, settings: BenchSettings, workdir: Path) -> None:
        super().__init__(settings, {}, workdir)
        self.mode = MODES[0]

    def server(self, target: Target) -> ServerProcess:
        server = super().server(target)
        if self.mode == "multicast":
            server.command += GROUP_ARGUMENTS
        return server

    def run_mode(self, mode: str, target: Target) -> StepResult:
        self.mode = mode
        self.subscriber_main = (functools.partial(subscriber_main, receiver_class=GroupReceiver)
                                if mode == "multicast" else subscriber_main)
        return self.run(target, self.settings.rate)


@dataclass(frozen=True)
class StepFigures:
    mode: str
    subscribers: int
    offered_per_s: float
    delivered_per_sub_per_s: float
    loss: float
    backbone_cpu_percent: float
    backbone_us_per_message: float
    stage_costs_us: dict[str, float] | None  # the pipeline's, per message in (fan-out: per copy sent)
    anomalies: dict[str, int]


def figures(mode: str, subscribers: int, step: StepResult) -> StepFigures:
    """The backbone's CPU (all its processes) per message each subscriber got, and its stage costs."""
    outcome = step.outcome
    server_cpu = sum(share for name, share in step.cpu.items() if name == "server" or name.startswith("server/"))
    delivered = outcome.delivered
    per_message = server_cpu * 1e4 / delivered if delivered > 0 else float("nan")  # 1 % of a core: 10,000 us/s
    copies = subscribers if mode == "unicast" else 1  # the group is one copy, whoever joined it
    costs = scaling.stage_costs(step.cpu, delivered, copies)
    return StepFigures(mode, subscribers, outcome.offered, delivered, outcome.loss, server_cpu, per_message,
                       asdict(costs) if costs is not None else None, step.anomalies)


def multicast_projection(costs: scaling.StageCosts, cores: int, subscribers: int) -> dict:
    """The pipeline with every subscriber on the group: one fan-out worker sends the group its one copy,
    the other cores receive; the slowest stage sets the rate, whatever the number of subscribers."""
    receive = cores - 2
    limits = {"receive": receive / costs.receive_us, "sequence": 1 / costs.sequence_us,
              "fanout": 1 / costs.fanout_us}
    stage = min(limits, key=lambda name: limits[name])
    return {"cores": cores, "subscribers": subscribers, "receive_workers": receive, "fanout_workers": 1,
            "msgs_per_s": limits[stage] * 1e6, "bottleneck": stage, "layout": "multicast"}


def _median_costs(steps: list[StepFigures]) -> scaling.StageCosts | None:
    measured = [step.stage_costs_us for step in steps if step.stage_costs_us is not None]
    if not measured:
        return None
    return scaling.StageCosts(*(statistics.median(costs[name] for costs in measured)
                                for name in ("receive_us", "sequence_us", "fanout_us")))


def summarize(steps: list[StepFigures]) -> dict:
    """Medians over rounds per (subscribers, mode), and the projections when the pipeline ran."""
    rows = []
    for subscribers in SUBSCRIBER_COUNTS:
        row: dict = {"subscribers": subscribers}
        for mode in MODES:
            mine = [step for step in steps if step.mode == mode and step.subscribers == subscribers]
            if mine:
                row[mode] = {
                    "backbone_us_per_message": statistics.median(s.backbone_us_per_message for s in mine),
                    "delivered_per_sub_per_s": statistics.median(s.delivered_per_sub_per_s for s in mine),
                    "loss": statistics.median(s.loss for s in mine),
                    "rounds": len(mine),
                }
        rows.append(row)
    projection = None
    unicast, multicast = (_median_costs([s for s in steps if s.mode == mode]) for mode in MODES)
    if unicast is not None and multicast is not None:
        projection = {
            "stage_costs_us": {"unicast": asdict(unicast), "multicast": asdict(multicast)},
            "rows": [row for cores in scaling.CORES for subscribers in scaling.SUBSCRIBERS for row in (
                {**asdict(next(p for p in scaling.project(unicast, cores, subscribers) if p.layout == "best")),
                 "layout": "unicast"},
                multicast_projection(multicast, cores, subscribers))],
        }
    return {"rows": rows, "scaling": projection}


def write_table(doc: dict, out: TextIO) -> None:
    settings = doc["settings"]
    out.write(f"fyrehose bench --multicast: {doc['machine']['cores']} cores, backbone --workers "
              f"{settings['workers']}, payload {settings['payload']} B, "
              f"{'max rate' if settings['rate'] is None else format(settings['rate'], ',.0f') + ' msgs/s'}, "
              f"medians of {settings['rounds']} rounds\n")
    out.write("subscribers  unicast us/msg  multicast us/msg  unicast msgs/s/sub  multicast msgs/s/sub  "
              "unicast loss  multicast loss\n")
    for row in doc["rows"]:
        uni, multi = row.get("unicast"), row.get("multicast")
        if uni is None or multi is None:
            continue
        out.write(f"{row['subscribers']:>11}  {uni['backbone_us_per_message']:>14.2f}  "
                  f"{multi['backbone_us_per_message']:>16.2f}  {uni['delivered_per_sub_per_s']:>18,.0f}  "
                  f"{multi['delivered_per_sub_per_s']:>20,.0f}  {uni['loss']:>12.3%}  {multi['loss']:>14.3%}\n")
    projection = doc["scaling"]
    if projection is None:
        out.write("(no scaling projection: it needs the pipeline, --workers 1 or more)\n")
        return
    costs = projection["stage_costs_us"]
    out.write(f"scaling on paper: unicast {costs['unicast']['receive_us']:.2f}/{costs['unicast']['sequence_us']:.2f}/"
              f"{costs['unicast']['fanout_us']:.2f} us receive/sequence/fan-out per copy; multicast "
              f"{costs['multicast']['receive_us']:.2f}/{costs['multicast']['sequence_us']:.2f}/"
              f"{costs['multicast']['fanout_us']:.2f} us (fan-out: the group's one copy)\n")
    out.write("cores  subscribers  unicast R/F  unicast msgs/s  bottleneck  multicast R/F  multicast msgs/s  bottleneck\n")
    rows = projection["rows"]
    for uni, multi in zip(rows[::2], rows[1::2]):
        out.write(f"{uni['cores']:>5}  {uni['subscribers']:>11}  {uni['receive_workers']:>7}/{uni['fanout_workers']:<3}  "
                  f"{uni['msgs_per_s']:>14,.0f}  {uni['bottleneck']:>10}  {multi['receive_workers']:>9}/"
                  f"{multi['fanout_workers']:<3}  {multi['msgs_per_s']:>16,.0f}  {multi['bottleneck']:>10}\n")


def run_multicast(args: argparse.Namespace) -> int:
    if args.mode != "servers" or args.targets:
        raise BenchError("--multicast measures the backbone alone, 4, 8 and 16 subscribers: no client mode, "
                         "no --targets")
    if os.environ.get(NAMESPACE_ENV):
        return _measure(args)
    return _in_own_namespace(args)


def _in_own_namespace(args: argparse.Namespace) -> int:
    """Create a namespace, run the measurement inside it with ``ip netns exec``, delete it."""
    unavailable = netns.namespaces_available()
    if unavailable is not None:
        raise BenchError(f"--multicast runs in a network namespace of its own: {unavailable}")
    with netns.Namespace("fyrehose-bench") as namespace:
        inner = [sys.executable, "-m", "fyrehose.commands.main", "bench", "--multicast", "--payload", str(args.payload),
                 "--duration", str(args.duration), "--rounds", str(args.rounds), "--grace", str(args.grace),
                 "--publishers", str(args.publishers), "--workers", str(args.workers)]
        if args.rate is not None:
            inner += ["--rate", str(args.rate)]
        if args.fanout is not None:
            inner += ["--fanout", str(args.fanout)]
        if args.json:
            inner += ["--json", str(Path(args.json).resolve())]
        return subprocess.run(namespace.prefix + inner, env={**os.environ, NAMESPACE_ENV: namespace.name}).returncode


def _measure(args: argparse.Namespace) -> int:
    workers = auto_workers() if args.workers == "auto" else args.workers
    target = Target("fyrehose" if workers else "fyrehose-single", FYREHOSE, multiprocess=bool(workers))
    machine = report.machine_info({})
    steps: list[StepFigures] = []
    with tempfile.TemporaryDirectory(prefix="fyrehose-bench-multicast-") as workdir:
        for subscribers in SUBSCRIBER_COUNTS:
            settings = BenchSettings(
                targets=[target], publishers=args.publishers, subscribers=subscribers, payload=args.payload,
                duration=args.duration, rate=args.rate, latency_rate=args.latency_rate, rounds=args.rounds,
                search_steps=0, grace=args.grace, workers=workers or 1, fanout=args.fanout)
            runner = MulticastStepRunner(settings, Path(workdir) / f"subscribers-{subscribers}")
            for number in range(1, args.rounds + 1):
                for mode in MODES:  # alternated: A B A B ...
                    step = figures(mode, subscribers, runner.run_mode(mode, target))
                    steps.append(step)
                    print(f"round {number}/{args.rounds} {subscribers} subscribers, {mode}: offered "
                          f"{step.offered_per_s:,.0f}/s, delivered {step.delivered_per_sub_per_s:,.0f}/s per "
                          f"subscriber, loss {step.loss:.3%}, backbone {step.backbone_cpu_percent:.0f}% of a core, "
                          f"{step.backbone_us_per_message:.2f} us per message", file=sys.stderr, flush=True)
    doc = {"machine": machine,
           "settings": {"workers": workers, "fanout": args.fanout, "payload": args.payload, "rate": args.rate,
                        "duration": args.duration, "rounds": args.rounds, "publishers": args.publishers,
                        "group": f"{GROUP[0]}:{GROUP[1]}", "namespace": os.environ.get(NAMESPACE_ENV)},
           **summarize(steps), "steps": [asdict(step) for step in steps]}
    write_table(doc, sys.stdout)
    if args.json:
        Path(args.json).write_text(json.dumps(doc, indent=2) + "\n")
    return 0

