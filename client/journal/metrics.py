"""The running journal's Prometheus metrics: lag, write rate, fsync latency, losses, FORWARD service.

Served with the backbone's exposition code (:mod:`fyrehose.runtime.metrics`);
this module only says what the journal counts.  Every figure is read from
what the recording path keeps anyway, so a scrape costs the journal nothing.
"""
from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable

from fyrehose.journal.lag import Lag
from fyrehose.journal.store import FsyncTimes
from fyrehose.runtime.metrics import Metric


class JournalMetrics:
    """``collect`` is called per scrape; the write rate is the rate since the previous scrape."""

    def __init__(self, lag: Callable[[], Lag], stats: Counter[str], forwarding: Counter[str], fsyncs: FsyncTimes,
                 head: Callable[[], int]) -> None:
        self._lag = lag
        self._stats = stats
        self._forwarding = forwarding
        self._fsyncs = fsyncs
        self._head = head
        self._last = (time.monotonic(), 0)

    def collect(self) -> list[Metric]:
        now = time.monotonic()
        lag: Lag = self._lag()
        written = self._stats["written"]
        then, before = self._last
        rate = (written - before) / (now - then) if now > then else 0.0
        self._last = (now, written)
        fsyncs = self._fsyncs
        return [
            ("fyrehose_journal_head", "gauge", "the highest sequence the backbone is known to have issued",
             [({}, self._head())]),
            ("fyrehose_journal_lag_messages", "gauge", "sequences the backbone issued that are not yet written",
             [({}, lag.messages)]),
            ("fyrehose_journal_lag_seconds", "gauge",
             "how long the oldest sequence not yet written has been known to exist", [({}, lag.seconds)]),
            ("fyrehose_journal_written_total", "counter", "messages written to segments", [({}, written)]),
            ("fyrehose_journal_written_datagrams_total", "counter", "blocks (stored datagrams) written",
             [({}, self._stats["blocks"])]),
            ("fyrehose_journal_write_rate", "gauge", "messages/s written since the previous scrape", [({}, rate)]),
            ("fyrehose_journal_lost_total", "counter", "sequences recorded as permanently lost in gaps.jsonl",
             [({}, self._stats["lost"])]),
            ("fyrehose_journal_fsyncs_total", "counter", "grouped fsyncs of the write path", [({}, fsyncs.count)]),
            ("fyrehose_journal_fsync_seconds_total", "counter", "seconds spent in them (divide by the count for "
             "the mean latency)", [({}, fsyncs.total)]),
            ("fyrehose_journal_fsync_seconds_max", "gauge", "the longest of them", [({}, fsyncs.longest)]),
            ("fyrehose_journal_forwarded_total", "counter", "messages re-DELIVERed answering FORWARDs",
             [({}, self._forwarding["forwarded"])]),
            ("fyrehose_journal_ring_full_total", "counter",
             "times the receive loop waited for the writer (the ring held its limit)",
             [({}, self._forwarding["ring full"])]),
        ]
