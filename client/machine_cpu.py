"""How busy the whole machine's CPUs were between two readings of its CPU-time counters.

A process's own CPU seconds cannot tell that the cores ran out: on a small
host the backbone, the load generators, anything else running and the
kernel's network processing share them.  The benchmark and the load test
both judge "the machine saturated" from this one share.
"""
from __future__ import annotations

from collections.abc import Mapping

_IN_USER = ("guest", "guest_nice")  # Linux counts guest time in user already
_IDLE = ("idle", "iowait")


def busy_share(before: Mapping[str, float], after: Mapping[str, float]) -> float:
    """The share (0..1) of all CPU time that was not idle between two ``psutil.cpu_times()._asdict()`` readings."""
    spent = {name: after[name] - before[name] for name in before.keys() & after.keys() if name not in _IN_USER}
    total = sum(spent.values())
    idle = sum(spent.get(name, 0.0) for name in _IDLE)
    return (total - idle) / total if total > 0 else 0.0
