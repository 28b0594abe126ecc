"""The arithmetic of the report: latency percentiles, medians over rounds, and which process saturated."""
from __future__ import annotations

import collections
import re
import statistics
from collections.abc import Iterable, Sequence

SATURATED_CPU = 90.0  # percent of one core: a process this busy is the bottleneck
_ORDINAL = re.compile(r"-\d+$")


def latency_ms(samples_ns: Sequence[int]) -> tuple[float | None, float | None, float | None]:
    """p50, p99 and p99.9 in milliseconds; None when fewer than two samples arrived."""
    if len(samples_ns) < 2:
        return None, None, None
    cuts = statistics.quantiles(samples_ns, n=1000, method="inclusive")
    return cuts[499] / 1e6, cuts[989] / 1e6, cuts[998] / 1e6


def median(values: Iterable[float | None]) -> float | None:
    present = [value for value in values if value is not None]
    return statistics.median(present) if present else None


def most_common(values: Iterable[str]) -> str:
    return collections.Counter(values).most_common(1)[0][0]


def role(process: str) -> str:
    """``subscriber-3`` -> ``subscriber``: the kind of process, for reports that span rounds."""
    return _ORDINAL.sub("", process)


def saturated_process(cpu: dict[str, float], machine_busy: float) -> str:
    """The kind of process that was the bottleneck, from each process's CPU in percent of one core.

    A single process at 90 % or more of a core is the answer.  Otherwise, if
    90 % of all the machine's CPU time was busy (load generators, servers,
    the kernel's network processing, anything else running), the machine
    itself ran out of CPU ("machine"); if neither, nothing was CPU-bound
    ("none": the limit lay elsewhere, e.g. socket buffers).
    """
    if cpu:
        name, busiest = max(cpu.items(), key=lambda item: item[1])
        if busiest >= SATURATED_CPU:
            return role(name)
    if machine_busy >= SATURATED_CPU:
        return "machine"
    return "none"


def spread(values: Iterable[float | None]) -> tuple[float, float, float] | None:
    """(min, median, max) of the values present: how far apart the rounds were, not only their middle."""
    present = sorted(value for value in values if value is not None)
    if not present:
        return None
    return present[0], statistics.median(present), present[-1]


def recovery_ms(seconds: Sequence[float]) -> tuple[float | None, float | None]:
    """p50 and p99 in milliseconds of the times from noticing a hole to filling it; None without a hole."""
    if not seconds:
        return None, None
    if len(seconds) == 1:
        return seconds[0] * 1e3, seconds[0] * 1e3
    cuts = statistics.quantiles(seconds, n=100, method="inclusive")
    return cuts[49] * 1e3, cuts[98] * 1e3
