"""The primary's side of the pair: what its standby holds and granted, and when output may leave.

Two promises rest on it (docs/operations.md, "A hot standby pair"):

* **Grants.**  While the standby is attached, the primary issues no number
  the standby has not granted (persisted as "may have been issued"), so a
  standby promoted at any moment starts above every number the primary can
  have issued: no number is ever issued twice, whatever the primary does
  after it lost the address.
* **Sync mode** (``--standby-sync``).  While attached, nothing the standby
  does not hold is DELIVERed or CONFIRMed.  The standby is detached only
  ``timeout`` seconds after its last ACK, and every STATE tells it how long
  the primary will stay gated at least (``clean_ms``), so a standby promoted
  before then knows that every number above what it holds was never sent.

Output is held back per flush (:meth:`releasable`); RECORDs are sent at
once, ahead of the output they cover, and kept for REPLAY requests.
"""
from __future__ import annotations

from collections import deque

from fyrehose.backbone.pair import frames
from fyrehose.protocol.codec import MAX_SEQUENCE

GRANT_TIME = 0.05  # seconds of numbers, at the rate they are issued, granted ahead
MIN_GRANT = 1024  # the unknown range after an asynchronous takeover is about a grant: small at a low rate
MAX_GRANT = 1 << 16
# the shortest span the issue rate is measured over: a flush held back asks again microseconds after the heartbeat,
# and a few numbers over such a span looked like millions a second (the largest grant, for no load)
RATE_SPAN = 0.0005
DETACH_AFTER = 1.0  # seconds without an ACK before the primary goes on alone
REPLAY_BYTES = 64 << 20


class ReplicationSource:
    def __init__(self, epoch: int, *, sync: bool, min_grant: int = MIN_GRANT, max_grant: int = MAX_GRANT,
                 timeout: float = DETACH_AFTER, replay_bytes: int = REPLAY_BYTES) -> None:
        if not 2 <= min_grant <= max_grant:
            raise ValueError("grants must be at least 2 numbers, the smallest no larger than the largest")
        if timeout <= 0:
            raise ValueError("the standby timeout must be more than 0 seconds")
        self.epoch = epoch
        self.sync = sync
        self.min_grant = min_grant
        self.max_grant = max_grant
        self.grant_block = min_grant  # follows the issue rate (GRANT_TIME's worth), between the two bounds
        self._rate_mark: tuple[int, float] | None = None  # (last issued, time) when the block was last sized
        self.timeout = timeout
        self.attached = False
        self.held = 0  # the standby's last ACKed contiguous sequence
        self.granted = 0
        self.last_ack = float("-inf")
        self.detachments = 0
        self._records: deque[tuple[int, int, bytes]] = deque()  # (first, last, RECORD datagram), oldest first
        self._record_bytes = 0
        self._replay_bytes = replay_bytes

    def keep(self, first: int, last: int, records: list[bytes]) -> None:
        """Remember RECORD datagrams (about to be sent) for REPLAY requests."""
        for record in records:
            self._records.append((first, last, record))
            self._record_bytes += len(record)
        while self._record_bytes > self._replay_bytes and self._records:
            self._record_bytes -= len(self._records.popleft()[2])

    def records_through(self, last: int) -> list[bytes]:
        """The kept RECORDs of numbers up to ``last`` (a demoted primary's: of the output it sent)."""
        return [record for _, end, record in self._records if end <= last]

    def on_ack(self, ack: frames.Ack, last_issued: int, now: float) -> None:
        """An ACK of this epoch from the peer; it attaches the standby once it granted every number issued."""
        self.held = max(self.held, ack.held)
        self.granted = max(self.granted, ack.granted)
        self.last_ack = now
        if not self.attached and self.granted >= last_issued:
            self.attached = True

    def expect(self, heard: float) -> None:
        """Start attached, as if the peer had ACKed at ``heard`` (when it was last heard) and granted nothing: a
        member promoted while its peer stood by, heard within the timeout, may have been promoted in the same
        instant over a link cut one way (both hosts elected together); its output waits for the peer's grants
        (and, sync, its ACKs) of this epoch, which a peer promoted too never gives (it stands down first, as the
        lower epoch or on hearing this one), or for the timeout from ``heard`` if the peer stays silent."""
        self.attached = True
        self.last_ack = heard

    def replay(self, request: frames.Replay) -> list[bytes]:
        """The kept RECORDs overlapping the requested range."""
        return [record for first, last, record in self._records
                if first <= request.to_seq and last >= request.from_seq]

    def handle_timers(self, now: float) -> bool:
        """Detach a silent standby; True when it was just detached."""
        if self.attached and now - self.last_ack > self.timeout:
            self.attached = False
            self.detachments += 1
            return True
        return False

    def want(self, last_issued: int, now: float) -> int:
        """The grant to ask for: a block ahead of the numbers issued, renewed at half a block; the block is
        GRANT_TIME's worth of numbers at the recent issue rate, so a renewal is rare at any rate and what an
        asynchronous takeover cannot account for stays small at a low one."""
        if self.granted - last_issued >= self.grant_block // 2:
            return self.granted
        mark = self._rate_mark
        if mark is None or now - mark[1] >= RATE_SPAN:
            if mark is not None:
                rate = (last_issued - mark[0]) / (now - mark[1])
                self.grant_block = max(self.min_grant, min(self.max_grant, int(rate * GRANT_TIME)))
            self._rate_mark = (last_issued, now)
        return min(MAX_SEQUENCE, last_issued + self.grant_block)

    def releasable(self, through: int) -> bool:
        """Whether output covering sequences up to ``through`` may be sent now."""
        if not self.attached:
            return True
        if self.granted < through:
            return False
        return not self.sync or self.held >= through

    def clean_ms(self, now: float) -> int:
        """How long, at least, the primary stays gated by this standby (0 unless attached in sync mode)."""
        if not (self.sync and self.attached):
            return 0
        return max(0, int((self.last_ack + self.timeout - now) * 1000))

    def lag(self, last_issued: int) -> int:
        """Messages issued that the standby does not hold yet."""
        return max(0, last_issued - self.held) if self.held else last_issued

    def flags(self) -> int:
        return (frames.STATE_SYNC if self.sync else 0) | (frames.STATE_ATTACHED if self.attached else 0)
