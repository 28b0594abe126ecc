"""When a publisher sends, and how many messages: a fixed offered rate, or as fast as the target takes them.

Pure: the driver passes the clock.  Messages due are sent together, at most
``batch`` per send and, below saturation, sends at least ``tick`` apart, so
every target gets the same few sends of packed messages per millisecond
rather than one system call per message.  A publisher that falls behind
sends full batches back to back until it has caught up; one that cannot catch
up simply offers less than asked, which the bench measures and reports.
"""
from __future__ import annotations

TICK = 0.001
MIN_WAIT = 1e-6  # the float boundary of the next message may round either way: never spin on it


class OfferSchedule:
    def __init__(self, rate: float | None, start: float, batch: int, tick: float = TICK) -> None:
        if rate is not None and rate <= 0:
            raise ValueError("the offered rate must be positive")
        if batch < 1:
            raise ValueError("a send carries at least one message")
        self.rate = rate
        self.start = start
        self.batch = batch
        self.tick = tick
        self.sent = 0
        self._last_send = float("-inf")

    def _backlog(self, now: float) -> int:
        if self.rate is None:
            return self.batch
        return int((now - self.start) * self.rate) - self.sent

    def due(self, now: float) -> int:
        """How many messages to send now (0 = none yet; see :meth:`wait`)."""
        backlog = self._backlog(now)
        if backlog >= self.batch:
            return self.batch
        if backlog <= 0 or now < self._last_send + self.tick:
            return 0
        return backlog

    def record(self, count: int, now: float) -> None:
        """``count`` messages just went out."""
        self.sent += count
        self._last_send = now

    def wait(self, now: float) -> float:
        """Seconds until :meth:`due` can return more than 0 (at least a microsecond when it returns 0 now)."""
        if self.due(now):
            return 0.0
        assert self.rate is not None  # without a rate every message is due at once
        next_due = self.start + (self.sent + 1) / self.rate
        return max(MIN_WAIT, next_due - now, self._last_send + self.tick - now)
