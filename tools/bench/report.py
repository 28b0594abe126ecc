"""The bench's output: one JSON document for other tools, one table for the terminal.

The JSON form is fixed (other tools read it)::

    {"machine": {...}, "results": [{"target": ..., "delivered_per_sub_per_s": float,
      "loss_before_recovery": float, "p50_ms": float, "p99_ms": float, "p999_ms": float,
      "saturated": "...", "holes": float, "recovery_p50_ms": float | null, "recovery_p99_ms": float | null},
      ...]}

Figures are medians over rounds; every result carries more keys after these
(rounds, CPU, offered rate), and the document has ``settings`` and
``ratios``, and ``scaling`` when the pipeline (target ``fyrehose``) ran
(fyrehose.tools.bench.scaling).  A latency field is null only when no sample arrived.
"""
from __future__ import annotations

import os
import platform
import statistics
import time
from dataclasses import asdict
from typing import TextIO

import psutil

from fyrehose.tools.bench import scaling, stats
from fyrehose.tools.bench.orchestra import BenchSettings, RoundResult
from fyrehose.tools.bench.targets import RATIOS

BUSY_WARNING = 10.0  # percent of the machine busy before the run that deserves a warning


def machine_info(server_versions: dict[str, str]) -> dict:
    model = platform.processor()
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            model = next((line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")), model)
    except OSError:
        pass
    return {
        "cores": os.cpu_count(),
        "cpu_model": model,
        "memory_bytes": psutil.virtual_memory().total,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "load_average": list(os.getloadavg()),
        # What else kept the CPUs busy just before the bench began: everything it measures competes with that.
        "background_busy_percent": psutil.cpu_percent(interval=0.5),
        "servers": server_versions,
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def summarise(target: str, rounds: list[RoundResult]) -> dict:
    def med(name: str) -> float | None:
        return stats.median(getattr(result, name) for result in rounds)

    cpu_names = sorted({name for result in rounds for name in result.cpu})
    return {
        "target": target,
        "delivered_per_sub_per_s": med("delivered"),
        "loss_before_recovery": med("loss"),
        "p50_ms": med("p50_ms"),
        "p99_ms": med("p99_ms"),
        "p999_ms": med("p999_ms"),
        "saturated": stats.most_common(result.saturated for result in rounds),
        "offered_per_s": med("offered"),
        "sustained_rounds": sum(result.sustained for result in rounds),
        "latency_rate": rounds[0].latency_rate,
        "latency_loss": med("latency_loss"),
        "cpu_percent": {name: stats.median(result.cpu.get(name) for result in rounds) for name in cpu_names},
        "machine_busy_percent": med("machine_busy"),
        "holes": med("holes"),
        "recovery_p50_ms": med("recovery_p50_ms"),
        "recovery_p99_ms": med("recovery_p99_ms"),
        "rounds": [asdict(result) for result in rounds],
    }


def ratios(rounds: dict[str, list[RoundResult]]) -> dict[str, float]:
    """Delivered-rate ratios of target pairs: the median of the ratios within each round (A and B side by side)."""
    out = {}
    for target, baseline in RATIOS:
        if target in rounds and baseline in rounds:
            pairs = [a.delivered / b.delivered for a, b in zip(rounds[target], rounds[baseline]) if b.delivered]
            if pairs:
                out[f"{target}/{baseline}"] = statistics.median(pairs)
    return out


def settings_record(settings: BenchSettings) -> dict:
    record = asdict(settings)
    record["targets"] = [target.name for target in settings.targets]
    return record


def document(settings: BenchSettings, machine: dict, rounds: dict[str, list[RoundResult]]) -> dict:
    doc = {
        "machine": machine,
        "settings": settings_record(settings),
        "results": [summarise(target.name, rounds[target.name]) for target in settings.targets],
        "ratios": ratios(rounds),
    }
    pipeline = [(result.cpu, result.delivered) for result in rounds.get("fyrehose", [])]
    record = scaling.scaling_record(pipeline, settings.subscribers, machine["cores"]) if pipeline else None
    if record is not None:
        doc["scaling"] = record
    return doc


def _number(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _cpu_cell(cpu: dict[str, float]) -> str:
    server = sum(share for name, share in cpu.items() if name.startswith("server"))
    publisher = max((share for name, share in cpu.items() if name.startswith("publisher")), default=0.0)
    subscriber = max((share for name, share in cpu.items() if name.startswith("subscriber")), default=0.0)
    return f"{server:.0f} / {publisher:.0f} / {subscriber:.0f}"


def _recovery_cell(result: dict) -> str:
    if result["recovery_p50_ms"] is None:
        return "-"
    return f"{result['recovery_p50_ms']:.1f} / {result['recovery_p99_ms']:.1f}"


def write_table(doc: dict, out: TextIO) -> None:
    settings = doc["settings"]
    machine = doc["machine"]
    mode = f"fixed rate {settings['rate']:,.0f}/s" if settings["rate"] else "max sustained rate (< 0.1% loss)"
    out.write(
        f"fyrehose bench: {settings['publishers']} publisher(s), {settings['subscribers']} subscriber(s), "
        f"{settings['payload']}-byte payloads, {settings['duration']:g} s steps, {settings['rounds']} round(s), "
        f"{mode}; machine: {machine['cores']} cores, {machine['cpu_model']}\n"
    )
    background = machine["background_busy_percent"]
    if background >= BUSY_WARNING:
        out.write(f"warning: other processes kept the machine {background:.0f}% busy just before the run "
                  f"(load average {machine['load_average'][0]:.1f}); every figure competes with them\n")
    rows = [("target", "delivered/s/sub", "loss", "offered/s", "sustained", "p50 ms", "p99 ms", "p99.9 ms",
             "recovery p50/p99 ms", "saturated", "CPU % srv/pub/sub", "busy %")]
    for result in doc["results"]:
        rows.append((
            result["target"],
            _number(result["delivered_per_sub_per_s"]),
            f"{result['loss_before_recovery']:.3%}",
            _number(result["offered_per_s"]),
            f"{result['sustained_rounds']}/{len(result['rounds'])}",
            _number(result["p50_ms"], 3),
            _number(result["p99_ms"], 3),
            _number(result["p999_ms"], 3),
            _recovery_cell(result),
            result["saturated"],
            _cpu_cell(result["cpu_percent"]),
            _number(result["machine_busy_percent"]),
        ))
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    for row in rows:
        cells = [row[0].ljust(widths[0])] + [cell.rjust(width) for cell, width in zip(row[1:], widths[1:])]
        out.write("  ".join(cells).rstrip() + "\n")
    latency_rate = doc["results"][0]["latency_rate"] if doc["results"] else None
    if latency_rate is not None:
        out.write(f"latency: publish-to-deliver at a fixed {latency_rate:,.0f} msgs/s; figures are medians over "
                  "rounds; CPU: the server's processes together, the busiest publisher, the busiest subscriber "
                  "(% of one core); busy: all cores, anyone's use; recovery: the fyrehose subscribers' holes in "
                  "the reported step, noticed to filled (REQUESTed; '-': no hole), medians over rounds\n")
    for pair, ratio in doc["ratios"].items():
        out.write(f"ratio {pair}: {ratio:.2f}x delivered per subscriber (median of per-round ratios)\n")
    if "scaling" in doc:
        scaling.write_table(doc["scaling"], out)
