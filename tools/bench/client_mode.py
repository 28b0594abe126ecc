"""``fyrehose bench client``: the Python clients side by side, rounds alternated, min/median/max reported.

Each step starts a fresh server, forks one subscriber (subscribed before
anything is published) and one publisher, and measures:

- ``msgs_per_s``: messages from the first publish to the last message
  iterated by the subscriber, per second: what a user's script sees;
- ``publish_per_s``: the publisher's own rate (first to last publish call);
- ``publish_cpu_us``, ``iterate_cpu_us`` and ``server_cpu_us``: CPU time
  per message of the publisher and subscriber processes (every thread of the
  client included) and of the server (all its processes);
- for fyrehose, ``requests`` (REQUESTs the subscriber sent) and the
  recovery time of each hole (noticed to filled), as p50/p99 ms.

A median hides the slow runs, so every rate is also given as its minimum
and maximum over the rounds, and each ratio against a peer as the worst,
median and best of the per-round ratios (``--rounds 10`` for the figures).

The JSON form::

    {"machine": {...}, "settings": {...}, "results": [{"target": ..., "msgs_per_s": float,
      "msgs_per_s_spread": [min, median, max], "publish_per_s": float, "publish_cpu_us": float,
      "iterate_cpu_us": float, "server_cpu_us": float, "lost": int, "requests": int | null,
      "holes": int | null, "recovery_p50_ms": float | null, "recovery_p99_ms": float | null,
      "rounds": [...]}, ...],
     "ratios": {"fyrehose/nats": float, ...}, "ratio_spreads": {"fyrehose/nats": [min, median, max], ...}}
"""
from __future__ import annotations

import multiprocessing
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TextIO

from fyrehose.runtime.machine_cpu import process_cpu_seconds
from fyrehose.tools.bench import stats
from fyrehose.tools.bench.client_drivers import ClientSpec, publisher_main, subscriber_main
from fyrehose.tools.bench.orchestra import _Child
from fyrehose.tools.bench.servers import server_for
from fyrehose.tools.bench.targets import NATS, REDIS, TARGETS, BenchError, Target

READY_TIMEOUT = 20.0
MIN_RESULT_TIMEOUT = 60.0
SLOWEST_RATE = 5_000.0  # msgs/s: a step slower than this is given up as broken
CALLBACK_TARGET = "nats-callback"  # nats-py consuming with a callback rather than iterating
CLIENT_TARGETS = ("fyrehose", "fyrehose-single", "redis", "nats", CALLBACK_TARGET)
DEFAULT_CLIENT_TARGETS = ",".join(CLIENT_TARGETS)


@dataclass(frozen=True)
class ClientSettings:
    targets: list[Target]
    messages: int
    batch: int
    payload: int
    rounds: int
    workers: int | str
    fanout: int | None


@dataclass
class ClientRound:
    target: str
    msgs_per_s: float
    publish_per_s: float
    publish_cpu_us: float
    iterate_cpu_us: float
    server_cpu_us: float  # every process of the server together
    received: int
    lost: int
    requests: int | None = None  # fyrehose only: REQUESTs the subscriber sent
    recovery_s: list[float] = field(default_factory=list, repr=False)  # fyrehose: per hole, noticed to filled

    def record(self) -> dict:
        """The round for the JSON document: recovery as a count and percentiles, not every sample."""
        out = asdict(self)
        samples = out.pop("recovery_s")
        out["holes"] = len(samples) if self.requests is not None else None
        out["recovery_p50_ms"], out["recovery_p99_ms"] = stats.recovery_ms(samples)
        return out


def parse_client_targets(text: str) -> list[Target]:
    """The targets of the client mode: servers' targets, plus nats-callback (the nats server, another consumer)."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        raise ValueError("no targets given")
    for name in names:
        if name not in CLIENT_TARGETS:
            raise ValueError(f"target {name!r} has no client mode (choose from {DEFAULT_CLIENT_TARGETS})")
    if len(set(names)) != len(names):
        raise ValueError("a target is named twice")
    return [Target(name, NATS) if name == CALLBACK_TARGET else TARGETS[name] for name in names]


def measure(settings: ClientSettings, target: Target, binaries: dict[str, str], workdir: Path) -> ClientRound:
    """One step of one target: a fresh server, one subscriber, one publisher."""
    context = multiprocessing.get_context("fork")  # the orchestrator has no threads to copy
    server = server_for(target, binaries, workdir, settings.workers, settings.fanout).start()
    spec = ClientSpec(target.protocol, server.address, settings.messages, settings.batch, settings.payload,
                      callback=target.name == CALLBACK_TARGET)
    children: list[_Child] = []
    try:
        subscriber = _Child(context, "subscriber", subscriber_main, spec)
        children.append(subscriber)
        subscriber.expect("ready", time.monotonic() + READY_TIMEOUT)
        publisher = _Child(context, "publisher", publisher_main, spec)
        children.append(publisher)
        publisher.expect("ready", time.monotonic() + READY_TIMEOUT)
        processes = server.processes()
        before = process_cpu_seconds(processes)
        publisher.conn.send(("start", 0.0, 0.0, 0.0))
        deadline = time.monotonic() + max(MIN_RESULT_TIMEOUT, settings.messages / SLOWEST_RATE)
        published = publisher.expect("result", deadline)
        iterated = subscriber.expect("result", deadline)
        after = process_cpu_seconds(processes)
        server_cpu = sum(seconds - before.get(name, 0.0) for name, seconds in after.items())
        if not server.alive():
            raise BenchError(f"the server exited during the step: {server.log_tail()}")
    except BenchError as exc:
        raise BenchError(f"{target.name}: {exc}") from None
    finally:
        for child in children:
            child.stop()
        server.stop()
    messages = settings.messages
    return ClientRound(
        target=target.name,
        msgs_per_s=messages / max(iterated["last"] - published["first"], 1e-9),
        publish_per_s=messages / max(published["last"] - published["first"], 1e-9),
        publish_cpu_us=published["cpu"] / messages * 1e6,
        iterate_cpu_us=iterated["cpu"] / messages * 1e6,
        server_cpu_us=server_cpu / messages * 1e6,
        received=iterated["received"],
        lost=iterated["lost"],
        requests=iterated.get("requests"),
        recovery_s=iterated.get("recoveries", []),
    )


def run_rounds(settings: ClientSettings, binaries: dict[str, str], workdir: Path) -> dict[str, list[ClientRound]]:
    rounds: dict[str, list[ClientRound]] = {target.name: [] for target in settings.targets}
    step = 0
    for number in range(1, settings.rounds + 1):
        for target in settings.targets:
            step += 1
            result = measure(settings, target, binaries, workdir / f"step-{step}-{target.name}")
            print(f"round {number}/{settings.rounds} {target.name}: {result.msgs_per_s:,.0f} msgs/s "
                  f"(publish {result.publish_per_s:,.0f}/s, {result.publish_cpu_us:.2f} us/msg; "
                  f"iterate {result.iterate_cpu_us:.2f} us/msg; server {result.server_cpu_us:.2f} us/msg; "
                  f"lost {result.lost}{_recovery_note(result)})", flush=True)
            rounds[target.name].append(result)
    return rounds


def _recovery_note(result: ClientRound) -> str:
    if result.requests is None:
        return ""
    p50, p99 = stats.recovery_ms(result.recovery_s)
    holes = len(result.recovery_s)
    filled = f", filled p50 {p50:.1f} / p99 {p99:.1f} ms" if holes else ""
    return f"; {result.requests} REQUESTs, {holes} holes{filled}"


def _summary(target: str, results: list[ClientRound]) -> dict:
    def med(name: str) -> float | None:
        return stats.median(getattr(result, name) for result in results)

    fyrehose = all(result.requests is not None for result in results)
    samples = [seconds for result in results for seconds in result.recovery_s]
    p50, p99 = stats.recovery_ms(samples)
    return {
        "target": target,
        "msgs_per_s": med("msgs_per_s"),
        "msgs_per_s_spread": stats.spread(result.msgs_per_s for result in results),
        "publish_per_s": med("publish_per_s"),
        "publish_cpu_us": med("publish_cpu_us"),
        "iterate_cpu_us": med("iterate_cpu_us"),
        "server_cpu_us": med("server_cpu_us"),
        "lost": sum(result.lost for result in results),
        "requests": sum(result.requests or 0 for result in results) if fyrehose else None,
        "holes": len(samples) if fyrehose else None,
        "recovery_p50_ms": p50,
        "recovery_p99_ms": p99,
        "rounds": [result.record() for result in results],
    }


def _ratio_spreads(rounds: dict[str, list[ClientRound]]) -> dict[str, tuple[float, float, float]]:
    """Each fyrehose target against each peer: worst, median and best of the per-round ratios (side by side)."""
    out = {}
    for target in ("fyrehose", "fyrehose-single"):
        for peer in (NATS, CALLBACK_TARGET, REDIS):
            if target in rounds and peer in rounds:
                spread = stats.spread(a.msgs_per_s / b.msgs_per_s
                                      for a, b in zip(rounds[target], rounds[peer]) if b.msgs_per_s)
                if spread is not None:
                    out[f"{target}/{peer}"] = spread
    return out


def document(settings: ClientSettings, machine: dict, rounds: dict[str, list[ClientRound]]) -> dict:
    record = asdict(settings)
    record["targets"] = [target.name for target in settings.targets]
    return {
        "machine": machine,
        "settings": record,
        "results": [_summary(target.name, rounds[target.name]) for target in settings.targets],
        "ratios": {pair: spread[1] for pair, spread in _ratio_spreads(rounds).items()},
        "ratio_spreads": _ratio_spreads(rounds),
    }


def write_table(doc: dict, out: TextIO) -> None:
    settings, machine = doc["settings"], doc["machine"]
    out.write(f"fyrehose bench client: {settings['messages']:,} messages of {settings['payload']} bytes in batches "
              f"of {settings['batch']:,}, one publisher and one subscriber process, {settings['rounds']} round(s); "
              f"machine: {machine['cores']} cores, {machine['cpu_model']}\n")
    rows = [("target", "msgs/s min", "median", "max", "publish/s", "publish us/msg", "iterate us/msg",
             "server us/msg", "lost", "REQUESTs", "recovery p50/p99 ms")]
    for result in doc["results"]:
        low, middle, high = result["msgs_per_s_spread"]
        recovery = "-" if result["recovery_p50_ms"] is None else \
            f"{result['recovery_p50_ms']:.1f} / {result['recovery_p99_ms']:.1f}"
        rows.append((result["target"], f"{low:,.0f}", f"{middle:,.0f}", f"{high:,.0f}",
                     f"{result['publish_per_s']:,.0f}", f"{result['publish_cpu_us']:.2f}",
                     f"{result['iterate_cpu_us']:.2f}", f"{result['server_cpu_us']:.2f}", f"{result['lost']:,}",
                     "-" if result["requests"] is None else f"{result['requests']:,}", recovery))
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    for row in rows:
        cells = [row[0].ljust(widths[0])] + [cell.rjust(width) for cell, width in zip(row[1:], widths[1:])]
        out.write("  ".join(cells).rstrip() + "\n")
    out.write("msgs/s: first publish to last message iterated, min/median/max over rounds (a fresh server each); "
              "us/msg: CPU time per message of the publisher, the subscriber (all their threads) and the server (all "
              "its processes), medians; REQUESTs: sent by the subscriber in all rounds; recovery: each hole from "
              "noticed to filled, all rounds pooled\n")
    for pair, (low, middle, high) in doc["ratio_spreads"].items():
        out.write(f"ratio {pair}: {middle:.2f}x end to end (per round: worst {low:.2f}x, best {high:.2f}x)\n")
