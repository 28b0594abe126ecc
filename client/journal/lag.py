"""How far the journal is behind the backbone, and when to say so: pure, time and sequences in.

The backbone's HEAD (the last sequence it issued, in every KEEPALIVE-ACK of a
client with FLAG_HEAD, and implied by every DELIVER) is sampled with the time
it was learnt.  The journal is ``head - written`` messages behind; in seconds,
it is behind by the age of the oldest sample that already announced a
sequence it has not written: the backbone had issued that sequence by then.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass

SAMPLES_KEPT = 4096  # head samples (two a second from ACKs, plus one per written batch): over half an hour


@dataclass(frozen=True)
class Lag:
    messages: int
    seconds: float


class LagClock:
    def __init__(self) -> None:
        self.head = 0
        self._samples: deque[tuple[float, int]] = deque(maxlen=SAMPLES_KEPT)  # (when learnt, head), heads ascend

    def saw_head(self, head: int, now: float) -> None:
        if head > self.head:
            self.head = head
            self._samples.append((now, head))

    def lag(self, written: int, now: float) -> Lag:
        """The lag of a journal that has written (or recorded lost) everything up to ``written``."""
        samples = self._samples
        while len(samples) > 1 and samples[1][1] <= written:  # keep the last sample at or below ``written``
            samples.popleft()
        behind = max(0, self.head - written)
        if not behind:
            return Lag(0, 0.0)
        for when, head in samples:
            if head > written:
                return Lag(behind, max(0.0, now - when))
        return Lag(behind, 0.0)


class LagWarning:
    """Says once when the lag passes ``threshold`` seconds, and once when it is back to nothing."""

    def __init__(self, threshold: float) -> None:
        self.threshold = threshold
        self.behind = False

    def update(self, lag: Lag) -> str | None:
        if not self.behind and lag.seconds > self.threshold:
            self.behind = True
            return (f"falling behind the backbone: {lag.messages} messages, {lag.seconds:.1f} s "
                    f"(more than {self.threshold:g} s)")
        if self.behind and lag.messages == 0:
            self.behind = False
            return "caught up with the backbone"
        return None
