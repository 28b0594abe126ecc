"""How far the journal is behind the backbone, and when to say so: pure, time and sequences in.

The backbone's HEAD (the last sequence it issued, in every KEEPALIVE-ACK of a
client with FLAG_HEAD, and implied by every DELIVER) is sampled with the time
it was learnt.  The journal is ``head - written`` messages behind.  In
seconds, it is behind by at least the age of the oldest sample that already
announced a sequence it has not written (the backbone had issued that
sequence by then), and by about the messages behind divided by the rate the
HEAD rose over the last seconds; the larger of the two is reported.  (The
journal learns the HEAD through the same socket as the stream, so a backlog
in that socket is seen only as it is read: the lag is a lower bound.)
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass

SAMPLES_KEPT = 4096  # head samples (two a second from ACKs, plus one per written batch): over half an hour
RATE_WINDOW = 2.0  # seconds of HEAD samples the rate is taken over
CAUGHT_UP = 0.1  # seconds behind that count as caught up


@dataclass(frozen=True)
class Lag:
    messages: int
    seconds: float


class LagClock:
    def __init__(self) -> None:
        self.head = 0
        self._samples: deque[tuple[float, int]] = deque(maxlen=SAMPLES_KEPT)  # (when learnt, head), heads ascend
        self._recent: deque[tuple[float, int]] = deque()  # the last RATE_WINDOW seconds of samples

    def saw_head(self, head: int, now: float) -> None:
        if head > self.head:
            self.head = head
            self._samples.append((now, head))
            recent = self._recent
            recent.append((now, head))
            while len(recent) > 2 and recent[1][0] <= now - RATE_WINDOW:
                recent.popleft()

    def rate(self, now: float) -> float:
        """Messages/s the HEAD rose over the last RATE_WINDOW seconds (0 when it did not)."""
        recent = self._recent
        if len(recent) < 2 or recent[-1][0] < now - RATE_WINDOW:
            return 0.0
        (then, low), (last, high) = recent[0], recent[-1]
        return (high - low) / (last - then) if last > then else 0.0

    def lag(self, written: int, now: float) -> Lag:
        """The lag of a journal that has written (or recorded lost) everything up to ``written``."""
        samples = self._samples
        while len(samples) > 1 and samples[1][1] <= written:  # keep the last sample at or below ``written``
            samples.popleft()
        behind = max(0, self.head - written)
        if not behind:
            return Lag(0, 0.0)
        age = next((max(0.0, now - when) for when, head in samples if head > written), 0.0)
        rate = self.rate(now)
        return Lag(behind, max(age, behind / rate if rate > 0 else 0.0))


class LagWarning:
    """Says once when the lag passes ``threshold`` seconds, and once when it has caught up.

    Caught up means nothing is behind, or less than CAUGHT_UP seconds (or half
    the threshold): while the stream flows, the last datagrams received are
    always a moment from being written, so "nothing" alone might never come.
    """

    def __init__(self, threshold: float) -> None:
        self.threshold = threshold
        self.caught_up = min(CAUGHT_UP, threshold / 2)
        self.behind = False

    def update(self, lag: Lag) -> str | None:
        if not self.behind and lag.seconds > self.threshold:
            self.behind = True
            return (f"falling behind the backbone: {lag.messages} messages, {lag.seconds:.1f} s "
                    f"(more than {self.threshold:g} s)")
        if self.behind and (lag.messages == 0 or lag.seconds <= self.caught_up):
            self.behind = False
            return "caught up with the backbone"
        return None
