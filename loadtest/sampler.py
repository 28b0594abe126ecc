"""Samples the backbone's metrics endpoint once a second into metrics.jsonl, from a background thread.

One JSON object per line, ``{"t": unix_seconds, "metrics": {"name{labels}": value}}``,
so the capacity report can line the backbone's counters (pushes, drops, CPU)
up with Locust's per-second history.  A failed scrape is counted, not fatal:
the load test goes on without that sample.
"""
from __future__ import annotations

import json
import threading
import time
import urllib.request
from pathlib import Path

from fyrehose.loadtest.prometheus import parse_samples

SCRAPE_TIMEOUT = 2.0


class MetricsSampler:
    def __init__(self, url: str, path: Path, interval: float = 1.0) -> None:
        self.url = url
        self.path = path
        self.interval = interval
        self.samples = 0
        self.errors = 0
        self.last_error: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="metrics-sampler", daemon=True)

    def start(self) -> MetricsSampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(SCRAPE_TIMEOUT + 1)

    def _run(self) -> None:
        next_sample = time.monotonic()
        with open(self.path, "w") as out:
            while not self._stop.wait(max(next_sample - time.monotonic(), 0)):
                next_sample += self.interval
                try:
                    with urllib.request.urlopen(self.url, timeout=SCRAPE_TIMEOUT) as response:
                        samples = parse_samples(response.read().decode())
                except (OSError, ValueError) as exc:
                    self.errors += 1
                    self.last_error = str(exc)
                    continue
                out.write(json.dumps({"t": time.time(), "metrics": samples}) + "\n")
                out.flush()
                self.samples += 1
