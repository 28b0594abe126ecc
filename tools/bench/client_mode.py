"""``fyrehose bench client``: the Python clients side by side, rounds alternated, medians reported.

Each step starts a fresh server, forks one subscriber (subscribed before
anything is published) and one publisher, and measures:

- ``msgs_per_s``: messages from the first publish to the last message
  iterated by the subscriber, per second: what a user's script sees;
- ``publish_per_s``: the publisher's own rate (first to last publish call);
- ``publish_cpu_us``, ``iterate_cpu_us`` and ``server_cpu_us``: CPU time
  per message of the publisher and subscriber processes (every thread of the
  client included) and of the server (all its processes).

The JSON form::

    {"machine": {...}, "settings": {...}, "results": [{"target": ..., "msgs_per_s": float,
      "publish_per_s": float, "publish_cpu_us": float, "iterate_cpu_us": float, "server_cpu_us": float,
      "lost": int, "rounds": [...]}, ...], "ratios": {"fyrehose/nats": float, ...}}
"""
from __future__ import annotations

import multiprocessing
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TextIO

from fyrehose.machine_cpu import process_cpu_seconds
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
                  f"lost {result.lost})", flush=True)
            rounds[target.name].append(result)
    return rounds


def _summary(target: str, results: list[ClientRound]) -> dict:
    def med(name: str) -> float | None:
        return stats.median(getattr(result, name) for result in results)

    return {
        "target": target,
        "msgs_per_s": med("msgs_per_s"),
        "publish_per_s": med("publish_per_s"),
        "publish_cpu_us": med("publish_cpu_us"),
        "iterate_cpu_us": med("iterate_cpu_us"),
        "server_cpu_us": med("server_cpu_us"),
        "lost": sum(result.lost for result in results),
        "rounds": [asdict(result) for result in results],
    }


def _ratios(rounds: dict[str, list[ClientRound]]) -> dict[str, float]:
    """Each fyrehose target against each peer: the median of the per-round ratios (run side by side)."""
    out = {}
    for target in ("fyrehose", "fyrehose-single"):
        for peer in (NATS, CALLBACK_TARGET, REDIS):
            if target in rounds and peer in rounds:
                pairs = [a.msgs_per_s / b.msgs_per_s for a, b in zip(rounds[target], rounds[peer]) if b.msgs_per_s]
                if pairs:
                    out[f"{target}/{peer}"] = stats.median(pairs)
    return out


def document(settings: ClientSettings, machine: dict, rounds: dict[str, list[ClientRound]]) -> dict:
    record = asdict(settings)
    record["targets"] = [target.name for target in settings.targets]
    return {
        "machine": machine,
        "settings": record,
        "results": [_summary(target.name, rounds[target.name]) for target in settings.targets],
        "ratios": _ratios(rounds),
    }


def write_table(doc: dict, out: TextIO) -> None:
    settings, machine = doc["settings"], doc["machine"]
    out.write(f"fyrehose bench client: {settings['messages']:,} messages of {settings['payload']} bytes in batches "
              f"of {settings['batch']:,}, one publisher and one subscriber process, {settings['rounds']} round(s); "
              f"machine: {machine['cores']} cores, {machine['cpu_model']}\n")
    rows = [("target", "msgs/s end to end", "publish/s", "publish us/msg", "iterate us/msg", "server us/msg",
             "lost")]
    for result in doc["results"]:
        rows.append((result["target"], f"{result['msgs_per_s']:,.0f}", f"{result['publish_per_s']:,.0f}",
                     f"{result['publish_cpu_us']:.2f}", f"{result['iterate_cpu_us']:.2f}",
                     f"{result['server_cpu_us']:.2f}", f"{result['lost']:,}"))
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    for row in rows:
        cells = [row[0].ljust(widths[0])] + [cell.rjust(width) for cell, width in zip(row[1:], widths[1:])]
        out.write("  ".join(cells).rstrip() + "\n")
    out.write("msgs/s: first publish to last message iterated; us/msg: CPU time per message of the publisher, the "
              "subscriber (all their threads) and the server (all its processes); figures are medians over rounds\n")
    for pair, ratio in doc["ratios"].items():
        out.write(f"ratio {pair}: {ratio:.2f}x end to end (median of per-round ratios)\n")
