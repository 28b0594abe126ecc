"""Per-source token buckets for the backbone's intake, in bounded memory.

One source that floods the backbone (a broken publisher in a retry loop, a
KEEPALIVE or REQUEST storm) would otherwise take the sequencer's whole time
from everybody else.  Each source IP gets ``rate`` datagrams per second with
bursts of one second's worth; a source over its budget has its datagrams
dropped (and counted by the caller) until its bucket refills.

Sources are keyed by IP address, not (IP, port): a host can open as many
ports as it likes, so per-port buckets would not limit it at all.  At most
``capacity`` sources are remembered; the least recently seen one is forgotten
first, which only ever gives a source a *full* bucket again, so eviction can
never make a well-behaved source be refused.  Pure: the caller supplies time.
"""
from __future__ import annotations

from collections import OrderedDict

DEFAULT_CAPACITY = 65536


class SourceRateLimiter:
    def __init__(self, rate: float, capacity: int = DEFAULT_CAPACITY) -> None:
        if rate <= 0:
            raise ValueError("rate must be positive")
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.rate = float(rate)
        self.burst = max(1.0, self.rate)  # one second of traffic
        self.capacity = capacity
        self._buckets: OrderedDict[str, list[float]] = OrderedDict()  # ip -> [tokens, stamp]

    def __len__(self) -> int:
        return len(self._buckets)

    def allow(self, source: str, now: float) -> bool:
        """Take one token from ``source``'s bucket; False when it has none left."""
        buckets = self._buckets
        bucket = buckets.get(source)
        if bucket is None:
            if len(buckets) >= self.capacity:
                buckets.popitem(last=False)
            buckets[source] = [self.burst - 1.0, now]
            return True
        buckets.move_to_end(source)
        tokens = min(self.burst, bucket[0] + max(0.0, now - bucket[1]) * self.rate)
        bucket[1] = now
        if tokens >= 1.0:
            bucket[0] = tokens - 1.0
            return True
        bucket[0] = tokens
        return False
