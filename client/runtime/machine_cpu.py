"""CPU-time readings of a run: each watched process's CPU seconds, and how busy the whole machine was.

A process's own CPU seconds cannot tell that the cores ran out: on a small
host the backbone, the load generators, anything else running and the
kernel's network processing share them.  The benchmark and the load test
both read their processes and judge "the machine saturated" with these two
functions.
"""
from __future__ import annotations

from collections.abc import Mapping

import psutil

_IN_USER = ("guest", "guest_nice")  # Linux counts guest time in user already
_IDLE = ("idle", "iowait")


def process_cpu_seconds(processes: Mapping[str, psutil.Process]) -> dict[str, float]:
    """User plus system CPU seconds so far of each process, by name; one that has ended is left out."""
    seconds = {}
    for name, process in processes.items():
        try:
            times = process.cpu_times()
        except psutil.Error:
            continue
        seconds[name] = times.user + times.system
    return seconds


def busy_share(before: Mapping[str, float], after: Mapping[str, float]) -> float:
    """The share (0..1) of all CPU time that was not idle between two ``psutil.cpu_times()._asdict()`` readings."""
    spent = {name: after[name] - before[name] for name in before.keys() & after.keys() if name not in _IN_USER}
    total = sum(spent.values())
    idle = sum(spent.get(name, 0.0) for name in _IDLE)
    return (total - idle) / total if total > 0 else 0.0
