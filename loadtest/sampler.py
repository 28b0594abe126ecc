"""Samples the backbone's metrics endpoint, the load generator's CPU and this host's CPU once a second into
metrics.jsonl.

One JSON object per line, ``{"t": unix_seconds, "metrics": {"name{labels}": value},
"generator_cpu_seconds": {"locust": seconds, ...}, "host_cpu_seconds": {"user": seconds, "idle": seconds,
...}}``, so the capacity report can line the backbone's counters (pushes,
drops, CPU) up with Locust's per-second history, and tell which side ran out
of CPU, or that this host's cores did (:mod:`fyrehose.loadtest.saturation`).
Without a metrics URL (a backbone given by address only) ``metrics`` stays
empty.  A failed scrape is counted, not fatal: the load test goes on without
that sample.
"""
from __future__ import annotations

import json
import threading
import time
import urllib.request
from pathlib import Path

import psutil

from fyrehose.loadtest.prometheus import parse_samples
from fyrehose.runtime.fatal import guarded
from fyrehose.runtime.machine_cpu import process_cpu_seconds

SCRAPE_TIMEOUT = 2.0


class MetricsSampler:
    def __init__(self, url: str | None, path: Path, interval: float = 1.0) -> None:
        self.url = url
        self.path = path
        self.interval = interval
        self.samples = 0
        self.errors = 0
        self.last_error: str | None = None
        self._processes: dict[str, psutil.Process] = {}  # the load generator's, by name
        self._stop = threading.Event()
        self._thread = threading.Thread(target=guarded(self._run, "metrics sampler"), name="metrics-sampler",
                                        daemon=True)

    def start(self) -> MetricsSampler:
        self._thread.start()
        return self

    def watch(self, name: str, pid: int) -> None:
        """Sample the CPU seconds of process ``pid`` (a Locust process of this run) too, under ``name``."""
        try:
            self._processes = {**self._processes, name: psutil.Process(pid)}  # replaced whole: the thread reads it
        except psutil.Error:
            pass  # already gone: its CPU is not sampled

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(SCRAPE_TIMEOUT + 1)

    def _run(self) -> None:
        next_sample = time.monotonic()
        with open(self.path, "w") as out:
            while not self._stop.wait(max(next_sample - time.monotonic(), 0)):
                next_sample += self.interval
                samples: dict[str, float] = {}
                if self.url:
                    try:
                        with urllib.request.urlopen(self.url, timeout=SCRAPE_TIMEOUT) as response:
                            samples = parse_samples(response.read().decode())
                    except (OSError, ValueError) as exc:
                        self.errors += 1
                        self.last_error = str(exc)
                        continue
                line = {"t": time.time(), "metrics": samples,
                        "generator_cpu_seconds": process_cpu_seconds(self._processes),  # an ended one left out
                        "host_cpu_seconds": psutil.cpu_times()._asdict()}
                out.write(json.dumps(line) + "\n")
                out.flush()
                self.samples += 1
