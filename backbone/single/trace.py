"""An opt-in trace of the single-process backbone's stages, per sampled datagram, to find what its slowest messages wait for.

``fyrehose backbone --workers 0 --trace FILE`` records, for one PUSH datagram in
``--trace-every`` (default 100), the CLOCK_MONOTONIC nanoseconds at which:

- ``published``: the bench's publisher stamped it (when its first payload
  carries the bench's sample mark; every process of a host shares the clock);
- ``woke``: the loop's poll returned before it was taken;
- ``received``: it was taken from the socket;
- ``sequenced``: :meth:`Backbone.receive` returned for it;
- ``flushed``: the flush it went out with was computed;
- ``sent``: the last send of that flush returned;

with ``drained`` (datagrams taken in that wake-up) and ``gc_ns`` / ``gc_generation``
(the garbage collections that ran between its wake-up and its sending).  Each
record is one JSON line.  ``python -m fyrehose.backbone.single.trace FILE`` then
compares the slowest 0.1 % of the records (publish, or wake-up, to sent) with
all of them, stage by stage: which stage the tail waits in, and how often a
collection ran in it.

The trace is a driver's instrument: the pure core is untouched, and with no
``--trace`` the loop pays one ``is None`` test per datagram.
"""
from __future__ import annotations

import argparse
import gc
import json
import statistics
import struct
import sys
import time
from pathlib import Path
from typing import TextIO

from fyrehose.protocol import codec

DEFAULT_EVERY = 100
MARK = ord("@")  # the bench's sample mark, then an 8-byte CLOCK_MONOTONIC stamp (fyrehose.tools.bench.wire)
_STAMP = struct.Struct(">Q")
STAGES = ("woke", "received", "sequenced", "flushed", "sent")


class StageTrace:
    def __init__(self, path: Path, every: int = DEFAULT_EVERY) -> None:
        if every < 1:
            raise ValueError("every must be at least 1")
        self.every = every
        self._out: TextIO = open(path, "w", buffering=1 << 20)  # noqa: SIM115 (closed by close())
        self._count = 0
        self._woke = 0
        self._drained = 0
        self._pending: list[dict] = []  # sampled datagrams of this wake-up
        self._gc_ns = 0  # collections' time since the wake-up
        self._gc_generation = -1
        self._gc_started = 0
        gc.callbacks.append(self._on_gc)

    def _on_gc(self, phase: str, info: dict) -> None:
        now = time.monotonic_ns()
        if phase == "start":
            self._gc_started = now
        else:
            self._gc_ns += now - self._gc_started
            self._gc_generation = max(self._gc_generation, info.get("generation", 0))

    def woke(self) -> None:
        self._woke = time.monotonic_ns()
        self._drained = 0
        if not self._pending:
            self._gc_ns = 0
            self._gc_generation = -1

    def received(self, datagram: bytes) -> dict | None:
        """A datagram taken from the socket; the record to complete when it is sampled, else None."""
        self._drained += 1
        if not datagram or datagram[0] != codec.PUSH:
            return None
        self._count += 1
        if self._count % self.every:
            return None
        record = {"published": None, "woke": self._woke, "received": time.monotonic_ns()}
        if len(datagram) >= codec.FRAME_HEADER + 9 and datagram[codec.FRAME_HEADER] == MARK:
            record["published"] = _STAMP.unpack_from(datagram, codec.FRAME_HEADER + 1)[0]
        self._pending.append(record)
        return record

    @staticmethod
    def sequenced(record: dict) -> None:
        record["sequenced"] = time.monotonic_ns()

    def flushed(self) -> None:
        now = time.monotonic_ns()
        for record in self._pending:
            record["flushed"] = now

    def sent(self) -> None:
        if not self._pending:
            return
        now = time.monotonic_ns()
        for record in self._pending:
            record["sent"] = now
            record["drained"] = self._drained
            record["gc_ns"] = self._gc_ns
            record["gc_generation"] = self._gc_generation
            self._out.write(json.dumps(record) + "\n")
        self._pending = []

    def close(self) -> None:
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)
        self._out.close()


# ---------------------------------------------------------------- the report


def load(path: Path) -> list[dict]:
    records = []
    with open(path) as lines:
        for line in lines:
            record = json.loads(line)
            if all(record.get(stage) is not None for stage in STAGES):
                records.append(record)
    return records


def _origin(record: dict) -> int:
    return record["woke"] if record.get("published") is None else record["published"]


def summarise(records: list[dict], tail: float = 0.001) -> dict:
    """Per stage, the median µs spent in it by all records and by the slowest ``tail`` of them (origin to sent)."""
    if not records:
        raise ValueError("no complete records")
    ranked = sorted(records, key=lambda record: record["sent"] - _origin(record))
    slowest = ranked[-max(1, round(len(ranked) * tail)):]

    def stages(group: list[dict]) -> dict:
        out = {}
        previous = "published" if all(record.get("published") is not None for record in group) else None
        for stage in STAGES:
            if previous is not None:
                out[f"{previous}->{stage}"] = statistics.median(
                    (record[stage] - record[previous]) / 1e3 for record in group)
            previous = stage
        out["total"] = statistics.median((record["sent"] - _origin(record)) / 1e3 for record in group)
        out["drained"] = statistics.median(record["drained"] for record in group)
        out["gc_share"] = sum(1 for record in group if record["gc_ns"]) / len(group)
        out["gc_us"] = statistics.median(record["gc_ns"] / 1e3 for record in group)
        return out

    return {"records": len(records), "tail": tail, "all": stages(records), "slowest": stages(slowest)}


def write_report(summary: dict, out: TextIO) -> None:
    every, worst = summary["all"], summary["slowest"]
    out.write(f"{summary['records']:,} sampled datagrams; the slowest {summary['tail']:.1%} against all, medians:\n")
    names = [name for name in every if name not in ("drained", "gc_share")]
    width = max(map(len, names)) + 2
    out.write(f"{'stage (us)'.ljust(width)}{'all':>12}{'slowest':>12}\n")
    for name in names:
        out.write(f"{name.ljust(width)}{every[name]:>12.1f}{worst[name]:>12.1f}\n")
    out.write(f"{'datagrams per wake-up'.ljust(width)}{every['drained']:>12.0f}{worst['drained']:>12.0f}\n")
    out.write(f"{'with a collection'.ljust(width)}{every['gc_share']:>12.1%}{worst['gc_share']:>12.1%}\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fyrehose.backbone.single.trace",
                                     description="where the slowest 0.1 % of a backbone trace's datagrams waited")
    parser.add_argument("trace", type=Path, help="a file written by fyrehose backbone --trace")
    parser.add_argument("--tail", type=float, default=0.001, help="the slowest fraction to compare (default 0.001)")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the summary as JSON here")
    args = parser.parse_args(argv)
    try:
        summary = summarise(load(args.trace), args.tail)
        if args.json is not None:
            args.json.write_text(json.dumps(summary, indent=1) + "\n")
    except (OSError, ValueError) as exc:
        print(f"fyrehose trace: error: {exc}", file=sys.stderr)
        return 1
    write_report(summary, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
