"""Reading every endpoint at once: one request per endpoint, all in flight together, each bounded in time.

A scrape is what the processes already serve to Prometheus (the backbone
reads its counters from shared memory in a side thread), so watching costs
them nothing more than one more scraper.  An endpoint that does not answer,
answers an error or something that is not the metrics format is reported in
its row, and never holds up the others beyond the timeout.
"""
from __future__ import annotations

import http.client
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from fyrehose.tools.watch.endpoints import display_name
from fyrehose.tools.watch.exposition import parse
from fyrehose.tools.watch.screen import Reading

MAX_BODY = 16 << 20  # far above any fyrehose process's metrics (a few KiB)
# Straight to each endpoint, as Prometheus scrapes: a proxy from the environment would stand between them.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def read_one(url: str, timeout: float) -> Reading:
    """The endpoint's samples, or why there are none; the reading is named as its row shows it."""
    name = display_name(url)
    try:
        with _OPENER.open(url, timeout=timeout) as response:
            body = response.read(MAX_BODY + 1)
        if len(body) > MAX_BODY:
            return Reading(name, time.monotonic(), None, f"more than {MAX_BODY} bytes")
        return Reading(name, time.monotonic(), parse(body.decode("utf-8", errors="replace")))
    except urllib.error.HTTPError as exc:
        return Reading(name, time.monotonic(), None, f"HTTP {exc.code} {exc.reason}")
    except urllib.error.URLError as exc:
        return Reading(name, time.monotonic(), None, str(exc.reason))
    except (OSError, ValueError, http.client.HTTPException) as exc:
        # a timeout, a reset, a server that does not speak HTTP, a body that is not the format (ExpositionError)
        detail = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        return Reading(name, time.monotonic(), None, detail)


class Scraper:
    """Reads a fixed list of endpoints, all at once, as often as asked."""

    def __init__(self, endpoints: Sequence[str], timeout: float) -> None:
        self.endpoints = list(endpoints)
        self.timeout = timeout
        self._pool = ThreadPoolExecutor(max_workers=min(32, len(self.endpoints)), thread_name_prefix="scrape")

    def read(self) -> list[Reading]:
        return list(self._pool.map(lambda url: read_one(url, self.timeout), self.endpoints))

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def __enter__(self) -> Scraper:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
