"""A token bucket that paces re-DELIVERs, so answering a large FORWARD cannot flood its requester."""
from __future__ import annotations


class TokenBucket:
    """Allows ``rate`` events per second with bursts of ``burst``; pure: the caller supplies the clock."""

    def __init__(self, rate: float, burst: int, now: float) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError("rate must be positive and burst at least 1")
        self.rate = rate
        self.burst = burst
        self._tokens = float(burst)
        self._stamp = now

    def wait_time(self, now: float) -> float:
        """Seconds until one event may go; 0 means take it now (and it is counted as taken)."""
        self._tokens = min(self.burst, self._tokens + (now - self._stamp) * self.rate)
        self._stamp = now
        if self._tokens >= 1:
            self._tokens -= 1
            return 0.0
        return (1 - self._tokens) / self.rate

    def take(self, count: int, now: float) -> float:
        """Seconds until ``count`` events may go at once (a datagram of several frames); 0 means they are taken.

        More than ``burst`` at once waits for a full bucket and leaves it in
        debt, so the long-run rate holds whatever the datagram sizes.
        """
        self._tokens = min(self.burst, self._tokens + (now - self._stamp) * self.rate)
        self._stamp = now
        need = min(count, self.burst)
        if self._tokens >= need:
            self._tokens -= count
            return 0.0
        return (need - self._tokens) / self.rate
