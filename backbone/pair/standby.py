"""The standby's side of the pair: the sequenced stream it holds, the grants it gives, and its takeover plan.

The standby holds an unbroken run of sequences from the first RECORD it saw
(a standby that starts late needs no history: the journals keep that), asks
the primary to REPLAY what went missing on the way, and learns the
primary's subscribers and CONFIRM memory from STATE and RECORD datagrams, so
that once promoted it delivers at once and answers a retried PUSH with its
original number.  A standby that starts following a primary that already
issued numbers (started late, or a new epoch) asks it once for the RECORDs
just below its first STATE and keeps only their tags: a publisher whose
CONFIRM was lost before then retries with the same tag, and after a takeover
must get its original number, not a second one.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from fyrehose.backbone.pair import frames

REPLAY_AFTER = 0.02  # a missing RECORD is asked for again this long after it was noticed (and then each time)
REBASE_AFTER = 2.0  # a hole the primary cannot replay for this long: the standby follows on from above it
MAX_AHEAD = 65536  # RECORDs held beyond a hole
UNACCOUNTED = 1 << 16  # the numbers below a start that a member holding nothing cannot account for


@dataclass(frozen=True, slots=True)
class Takeover:
    """What a promoted standby does first (docs/operations.md, "What a takeover does").

    ``start`` is its first number; ``resend`` the held sequences the old
    primary may not have sent to every subscriber yet (sent again at once);
    ``unknown`` the numbers between what it holds (or, a demoted primary,
    what it sent) and ``start`` (None when there are none): ``never_sent`` when the old primary was still gated
    by this standby (sync mode) or this member was that primary itself (a
    demoted primary promoted again), else they are looked for at the journals
    and what nobody has is reported lost.  ``reopen`` the numbers an earlier
    takeover had not answered yet (below what it holds, or below its own start): whoever issued them, they may
    have been delivered, so they are looked for at the journals again whatever ``never_sent`` says.
    """

    epoch: int
    start: int
    resend: tuple[int, int] | None
    unknown: tuple[int, int] | None
    never_sent: bool
    reopen: tuple[int, int] | None = None


class ReplicaFollower:
    """What a standby knows of the stream; ``issued`` and ``delivered`` describe a member that was primary itself
    until now (a demoted primary): it issued up to ``issued`` and sent the output up to ``delivered`` (what it
    held back was dropped, and the tags it carried forgotten: those numbers are never sent); ``reopen`` the numbers
    its own takeover had not answered yet."""

    def __init__(self, epoch: int, persisted: int, *, issued: int = 0, delivered: int = 0,
                 reopen: tuple[int, int] | None = None) -> None:
        self.epoch = epoch  # the highest epoch seen
        self.persisted = persisted  # its state file's mark: no number above it was issued, as far as it knows
        self.wanted = 0  # the highest grant the current primary asked for
        self.granted = 0  # what of it is persisted: the primary may issue numbers up to it
        self.base: int | None = None  # the sequence before the first one held
        self.held = 0
        self.primary: frames.State | None = None  # the last STATE of the current epoch's primary
        self.heard = float("-inf")  # when a datagram of the current epoch's primary last arrived
        self.clean_until = float("-inf")  # promoted before this, the old primary sent nothing above `held`
        self.caught_up_at: int | None = None  # the primary's last issued when this standby first heard it
        self.stood_down = False  # the primary it followed is a standby now (its ACKs say so): none to wait for
        self.known = 0  # the highest number a peer that stands by says it issued or granted
        self.peer_held = 0  # the highest it says it holds (a demoted primary: what it issued)
        # the numbers a primary it followed declared never sent (its STATEs' flag, below the stream this member
        # holds of that epoch), kept once that primary's STATEs say them answered: its GONE may have reached no
        # subscriber (a link cut one way, from that primary to the clients, lets their KEEPALIVEs in), so a
        # promotion asks for them again.  (Only the flag says a takeover left them open: DELIVERED below the
        # stream held is also a primary's output not sent yet, which a promotion must not reopen later.)
        self.declared: tuple[int, int] | None = None
        self._ahead: dict[int, frames.Record] = {}  # RECORDs beyond a hole, by first sequence
        self._missing_since: float | None = None
        self._next_replay = 0.0
        # its own stream, until it hears another primary: it issued nothing above `issued`, and no primary since
        # it did; the numbers it reserved beyond were never sent
        self._own_delivered: int | None = None
        self._reopen: tuple[int, int] | None = None
        # the numbers below the held stream whose tags it takes from its primary, and until when it asks for them
        self._tags_wanted: tuple[int, int] | None = None
        self._tags_until = 0.0
        self._next_tags = 0.0
        if issued:
            self.base, self.held, self._own_delivered = 0, issued, min(delivered, issued)
            self._reopen = reopen

    def newer(self, epoch: int) -> bool:
        """Take note of a peer's epoch; True when it is above any seen (the held stream starts over)."""
        if epoch <= self.epoch:
            return False
        self.epoch = epoch
        self.base = None
        self.held = 0
        self.primary = None
        self._own_delivered = None
        self._reopen = None
        self.caught_up_at = None
        self.stood_down = False
        self.wanted = self.granted = 0
        self._tags_wanted = None
        self._ahead.clear()
        self._missing_since = None
        return True

    @property
    def caught_up(self) -> bool:
        """Whether it holds everything the primary had issued when it first heard it (fit to take over)."""
        return self.caught_up_at is not None and self.held >= self.caught_up_at

    @property
    def fit(self) -> bool:
        """Whether it may take over now without a number issued twice: it follows no primary, or holds what
        that primary had issued when first heard and is attached (the primary asks it for every number)."""
        primary = self.primary
        return primary is None or self.stood_down or (self.caught_up and bool(primary.flags & frames.STATE_ATTACHED))

    def persisted_up_to(self, durable: int) -> None:
        """The state file now holds ``durable``: grant what the primary asked for, as far as that covers it."""
        self.persisted = max(self.persisted, durable)
        self.granted = max(self.granted, min(self.wanted, durable))

    def on_peer_ack(self, ack: frames.Ack) -> bool:
        """The peer ACKs too: it stands by in ``ack.epoch`` (of this epoch or a newer one).  A primary this
        follower followed stood down, so it waits for nobody; the numbers the peer issued (a demoted primary
        holds what it issued) or granted stay below any start.  True when the primary just stood down."""
        self.known = max(self.known, ack.held, ack.granted)
        self.peer_held = max(self.peer_held, ack.held)
        if self.newer(ack.epoch) or self.primary is None or self.stood_down:
            return False
        self.stood_down = True
        return True

    def on_peer_mark(self, mark: int) -> None:
        """A peer that follows no primary told its state file's mark: numbers up to it may have been issued on
        its side (this member may know nothing else, its own state directory lost)."""
        self.known = max(self.known, mark)

    def on_state(self, state: frames.State, now: float) -> None:
        self.stood_down = False
        if self._own_delivered is not None:  # another primary of this epoch: its stream, not this member's own
            self._own_delivered = None
            self._reopen = None
            self.base = None
        self.primary = state
        self.heard = now
        self.wanted = max(self.wanted, state.want)
        if state.flags & frames.STATE_SYNC and state.flags & frames.STATE_ATTACHED:
            self.clean_until = now + state.clean_ms / 1000.0
        else:
            self.clean_until = float("-inf")
        if self.caught_up_at is None:
            self.caught_up_at = state.last_issued
            if self.base is None:
                self.base = self.held = state.last_issued  # follows on from here; history is the journals'
                if state.last_issued:  # ... but the tags of what it CONFIRMed just before are asked for
                    self._tags_wanted = (max(1, state.last_issued - UNACCOUNTED + 1), state.last_issued)
                    self._next_tags, self._tags_until = now, now + REBASE_AFTER
        if state.flags & frames.STATE_NEVER_SENT and self.base is not None and state.delivered < self.base:
            self.declared = (state.delivered + 1, self.base)

    def tags_only(self, record: frames.Record) -> bool:
        """Whether ``record`` lies below the held stream, asked for its tags only (the first stops the asking:
        the primary sent all it had).  Those a primary took as standby keep their earlier epoch: a process that
        did not ask (restarted meanwhile) does not take them for the stream, which they are below."""
        wanted = self._tags_wanted
        if wanted is None or record.epoch > self.epoch or not wanted[0] <= record.last <= wanted[1]:
            return False
        self._next_tags = math.inf
        return True

    def on_record(self, record: frames.Record, now: float) -> list[frames.Record]:
        """The RECORDs now held in order (none when this one is old, a duplicate, or beyond a hole)."""
        self.heard = now
        if self.base is None:
            self.base = self.held = record.first - 1
        if record.last <= self.held:
            return []
        if record.first > self.held + 1:
            if len(self._ahead) < MAX_AHEAD:
                self._ahead.setdefault(record.first, record)
            if self._missing_since is None:
                self._missing_since = now
                self._next_replay = now + REPLAY_AFTER
            return []
        applied = [record]
        self.held = record.last
        ahead = self._ahead
        while ahead:
            following = ahead.pop(self.held + 1, None)
            if following is None:
                stale = [first for first, held in ahead.items() if held.last <= self.held]
                for first in stale:
                    del ahead[first]
                if not stale:
                    break
                continue
            applied.append(following)
            self.held = following.last
        self._missing_since = None if not ahead and not self._behind() else self._missing_since or now
        return applied

    def _behind(self) -> bool:
        return self.primary is not None and self.primary.last_issued > self.held

    def replays(self, now: float) -> list[bytes]:
        """REPLAY requests for the hole above what is held, when it has waited long enough, and for the tags
        below it (until some arrive, for REBASE_AFTER at most: the primary may not have them)."""
        asked = []
        wanted = self._tags_wanted
        if wanted is not None and now >= self._next_tags and now <= self._tags_until:
            self._next_tags = now + REPLAY_AFTER * 4
            asked.append(frames.encode_replay(self.epoch, *wanted))
        return asked + self._hole_replays(now)

    def _hole_replays(self, now: float) -> list[bytes]:
        if self.base is None or not (self._ahead or self._behind()):
            self._missing_since = None
            return []
        if self._missing_since is None:
            self._missing_since = now
            self._next_replay = now + REPLAY_AFTER
            return []
        if now < self._next_replay:
            return []
        if now - self._missing_since > REBASE_AFTER and self._ahead:  # the primary no longer has it
            first = min(self._ahead)
            self.base = self.held = first - 1
            self._missing_since = None
            return []
        self._next_replay = now + REPLAY_AFTER * 4
        to_seq = min(self._ahead) - 1 if self._ahead else self.primary.last_issued if self.primary else self.held
        return [frames.encode_replay(self.epoch, self.held + 1, to_seq)] if to_seq > self.held else []

    def ack(self) -> bytes:
        return frames.encode_ack(self.epoch, self.held, self.granted)

    def takeover(self, now: float, window: int = UNACCOUNTED) -> Takeover:
        """The plan for a promotion now: a new epoch, numbers above every grant and every number ever seen.

        Having followed a primary, it starts above that primary's grant (the
        primary issued nothing above it, and everything before was granted by
        that primary's own standby in turn); knowing none, above its own state
        file's mark; either way above what a peer standing by said it issued.
        Holding nothing, it cannot tell which of the ``window`` numbers below
        its start (a reservation block or a grant: where the last numbers
        of a primary that died lie) were issued: they are looked for at the
        journals, and what nobody has is GONE, so that no subscriber waits for
        them.
        """
        if self.primary is not None:
            start = max(self.granted, self.primary.last_issued, self.held, self.known) + 1
        else:
            start = max(self.persisted, self.held, self.known) + 1
        resend = None
        primary = self.primary
        if primary is not None and self.held > primary.delivered:
            resend = (max(primary.delivered + 1, (self.base or 0) + 1), self.held)
        reopen = None
        if self._own_delivered is not None:  # what it held back was dropped, its tags forgotten: never sent
            low = self._own_delivered + 1
            reopen = self._reopen
        elif self.base is not None:
            low = max(self.held, self.base) + 1
            if primary is not None and primary.delivered < self.base:  # it had not answered below what it
                reopen = (primary.delivered + 1, self.base)  # holds (a takeover of its own still open)
            elif self.declared is not None and self.declared[1] <= self.base:  # ... or said so, maybe wrongly
                reopen = self.declared
        else:  # it holds nothing (a restarted member): a primary that died issued its last numbers in the window
            low = max(1, start - window)
        unknown = (low, start - 1) if low <= start - 1 else None
        never_sent = now < self.clean_until or (self._own_delivered is not None and self.peer_held <= self.held)
        return Takeover(self.epoch + 1, start, resend, unknown, never_sent, reopen)
