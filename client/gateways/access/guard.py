"""Per source address: failed logins slowed, connections capped, refusals logged at most once a second.

A client may not try thousands of passwords a second: after
``FREE_FAILURES`` failed logins from one address, every further attempt from
it within a refusal window is refused at once, without checking anything (so
guessing costs the gateway nothing either), and each failure doubles the
window, up to ``MAX_WINDOW``.  A success, or ``FORGET_AFTER`` seconds without
a failure, clears the address.  The table is bounded: at ``MAX_ADDRESSES`` the
oldest entry goes.

Pure: time comes in as ``now`` (seconds, any monotonic origin).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

FREE_FAILURES = 3  # failed logins an address may make before it is slowed
FIRST_WINDOW = 1.0  # seconds of refusal after the first failure past the free ones
MAX_WINDOW = 60.0
FORGET_AFTER = 300.0  # seconds without a failure after which an address starts afresh
MAX_ADDRESSES = 65536
LOG_INTERVAL = 1.0  # seconds between two log lines about one address


@dataclass
class _Failures:
    count: int
    last: float
    blocked_until: float


class LoginThrottle:
    """Failed logins per address, and whether an address may try now."""

    def __init__(self) -> None:
        self._addresses: dict[str, _Failures] = {}

    def blocked(self, address: str, now: float) -> float:
        """Seconds this address must still wait before a login is even looked at (0: it may try now)."""
        failures = self._addresses.get(address)
        if failures is None:
            return 0.0
        if now - failures.last >= FORGET_AFTER:
            del self._addresses[address]
            return 0.0
        return max(0.0, failures.blocked_until - now)

    def failed(self, address: str, now: float) -> None:
        failures = self._addresses.pop(address, None)  # re-inserted last: the dict's order is the eviction order
        if failures is None or now - failures.last >= FORGET_AFTER:
            failures = _Failures(0, now, now)
        failures.count += 1
        failures.last = now
        over = failures.count - FREE_FAILURES
        if over > 0:
            failures.blocked_until = now + min(MAX_WINDOW, FIRST_WINDOW * 2 ** min(over - 1, 16))
        if len(self._addresses) >= MAX_ADDRESSES:
            del self._addresses[next(iter(self._addresses))]
        self._addresses[address] = failures

    def succeeded(self, address: str) -> None:
        self._addresses.pop(address, None)

    def __len__(self) -> int:
        return len(self._addresses)


class AddressCounts:
    """Clients connected per source address, for ``--max-clients-per-address``."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._counts: Counter[str] = Counter()

    def admit(self, address: str) -> bool:
        """Count one more client of ``address``; False (and nothing counted) when it already has ``limit``."""
        if self._counts[address] >= self.limit:
            return False
        self._counts[address] += 1
        return True

    def release(self, address: str) -> None:
        self._counts[address] -= 1
        if self._counts[address] <= 0:
            del self._counts[address]

    def __getitem__(self, address: str) -> int:
        return self._counts.get(address, 0)


class LogLimiter:
    """Whether a line about an address may be logged now: at most one per ``LOG_INTERVAL`` per address."""

    def __init__(self, interval: float = LOG_INTERVAL) -> None:
        self.interval = interval
        self._last: dict[str, float] = {}
        self.suppressed = 0

    def allow(self, address: str, now: float) -> bool:
        last = self._last.get(address)
        if last is not None and now - last < self.interval:
            self.suppressed += 1
            return False
        if len(self._last) >= MAX_ADDRESSES:
            self._last = {key: at for key, at in self._last.items() if now - at < self.interval}
            if len(self._last) >= MAX_ADDRESSES:
                self._last.clear()
        self._last[address] = now
        return True
