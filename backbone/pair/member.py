"""One member of a hot standby pair as a pure state machine: role, epoch, fencing, held output, grants.

The member takes what its driver reads (pair datagrams, the promote and
demote signals, how far its state file is durably written) and the time, and
answers with :class:`Actions`: what to send to the peer, what client output
may leave now, what grant to reserve, and the role and epoch to write.  The
driver (``backbone/single/pair_member.py``) does nothing else, so every rule
below is tested without sockets, files or signals (tests/backbone/pair/).

As primary it sends every sequenced entry to the standby as RECORDs before
the entry's DELIVERs and CONFIRMs leave, and holds output back while the
:class:`~fyrehose.backbone.pair.primary.ReplicationSource` says so; as
standby it follows with a :class:`~fyrehose.backbone.pair.standby.ReplicaFollower`
(docs/operations.md, "A hot standby pair").  A primary that meets a newer
epoch, or a primary of its own epoch with the higher pair address, stands
down at once and follows it (it is *fenced* until it holds that primary's
stream).  Every way to primary starts above every number that can have been
issued and answers at once the numbers between that it cannot account for:
sent again from what it holds, recovered from the journals, or GONE.
"""
from __future__ import annotations

import enum
import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from fyrehose.backbone.confirms import ConfirmCache
from fyrehose.backbone.core import RECOVERY_WINDOW, Backbone
from fyrehose.backbone.pair import frames
from fyrehose.backbone.pair.primary import DETACH_AFTER, MAX_GRANT, ReplicationSource
from fyrehose.backbone.pair.standby import UNACCOUNTED, ReplicaFollower
from fyrehose.backbone.pushes import LogEntry
from fyrehose.backbone.sequence_counter import SequenceCounter
from fyrehose.protocol import codec
from fyrehose.protocol.codec import Address, Run

TAGGED_BYTES = 16 << 20  # RECORDs with tags a standby keeps, for its own standby once it is promoted
STATE_EVERY = 0.02  # heartbeat of both members (STATE from the primary, ACK from the standby)
MEMBERS_EVERY = 0.25  # the primary's client table goes to the standby this often
# After a primary stands down (demoted, fenced, or the peer it followed), its member and its peer's say `fenced`
# this long: several looks of keepalived's check (0.1 s apart), so that a host still holding the address with a
# standby behind it gives the address up and keepalived elects a master again, which it then promotes.
STAND_DOWN_HOLD = 0.5
# ... and for this many heartbeats too: a forward jump of this host's clock (a VM resumed, say) must not cut the
# hold short while keepalived, on its own timers, has not looked yet
STAND_DOWN_BEATS = round(STAND_DOWN_HOLD / STATE_EVERY)

Send = tuple[bytes | memoryview, Address]
Tagged = tuple[Address, list[Run]]  # a publisher and the (tag, count, sequence) runs of one sequenced datagram


class Role(enum.Enum):
    """What the role file says; keepalived's check reads it (``fenced`` keeps a host from becoming master)."""

    PRIMARY = "primary"
    STANDBY = "standby"  # fit to take over
    FENCED = "fenced"  # a standby not fit to take over yet


@dataclass(slots=True)
class Actions:
    """What the driver does for one call, in this order: reserve, write the epoch, send to the peer, send to the
    clients, write the role.  ``grant`` is a reservation mark to persist: a grant the primary asked for, or the
    number below a promoted member's start when only the peer knew of the numbers it starts above."""

    to_peer: list[bytes] = field(default_factory=list)
    to_clients: list[Send] = field(default_factory=list)
    grant: int | None = None
    epoch: int | None = None
    role: Role | None = None


def _outside(span: tuple[int, int], inner: tuple[int, int] | None) -> list[tuple[int, int]]:
    """The parts of ``span`` outside ``inner``."""
    if inner is None or inner[1] < span[0] or inner[0] > span[1]:
        return [span]
    return [part for part in ((span[0], inner[0] - 1), (inner[1] + 1, span[1])) if part[0] <= part[1]]


class PairMember:
    def __init__(self, backbone: Backbone, address: Address, peer: Address, service: Address, *, epoch: int,
                 durable: int, sync: bool, timeout: float = DETACH_AFTER, key: bytes | None = None) -> None:
        self.backbone = backbone
        self.address = address
        self.peer = peer
        self.service = service  # the clients' address (the virtual IP): recovered DELIVERs come back to it
        self.sync = sync
        self.timeout = timeout
        self.key = key  # every pair datagram sealed with it, and only sealed ones taken
        # the lower pair address takes odd epochs, the higher even ones: even a member that never heard of its
        # peer's promotion (the peer down meanwhile) cannot promote into an epoch the peer led
        self._parity = 1 if address < peer else 0
        self.counters = backbone.counters
        self.epoch = epoch
        self.primary = False
        self.durable = durable  # how far the state file is durably written
        self.follower = ReplicaFollower(epoch, durable)
        self.source: ReplicationSource | None = None
        self._fenced_by = 0  # the epoch that made this primary stand down: unfit until it follows that epoch
        # gated output: (the last sequence it covers, the sends, the publishers' tag runs it CONFIRMs)
        self._held: deque[tuple[int, list[Send], list[Tagged]]] = deque()
        self._flushed: list[Tagged] = []  # the tag runs of the flush between replicate() and gate()
        self._next_state = 0.0
        self._next_members = 0.0
        self._wanted = 0  # the highest grant asked of the reservations (standby) or of the standby (primary)
        self._delivered = 0  # the last sequence whose output left, as far as STATEs say (below: answered)
        self._sent = 0  # the last sequence whose output left
        self._open: tuple[int, int] | None = None  # the numbers its takeover has not answered yet
        self._open_never_sent = False  # ... and they were all declared never sent (the STATEs say so)
        # after a promotion, until what it could not account for has been answered (the GONE left, or the
        # journals' window ended and its GONE left, and a subscriber was heard since), the STATEs say nothing
        # above its start was delivered: a standby promoted meanwhile answers those numbers in turn
        self._answered: tuple[int, float, int] | None = None  # (below, window's end, GONE answers by then)
        self._told_at: float | None = None  # when its GONE left: a subscriber heard after it was reachable
        self._acked = False  # a standby owes an ACK for what it took
        # the tagged RECORDs it took as standby, newest last: promoted, it keeps them for its standby's REPLAY of
        # the tags below that standby's first STATE (the held entries it sends again among them)
        self._tagged: deque[frames.Record] = deque()
        self._tagged_bytes = 0
        # the RECORDs of the output it sent as primary, kept once demoted: a promoted peer's RECOVER gets them
        self._sent_records: list[bytes] = []
        self._asking: tuple[int, int] | None = None  # the range its recovery asked its peer for
        self._peer_heard = float("-inf")  # when a valid pair datagram from the peer last arrived
        self._out = Actions()
        self._now = float("-inf")  # the latest time given
        # `fenced` until then: a primary stood down (STAND_DOWN_HOLD); a restarted member (it has an epoch) holds
        # from its start too, as its primary may have been this very host's backbone, restarted before
        # keepalived's check saw it gone: the address must not stay on a host whose backbone stands by
        self._hold_until = math.inf if epoch else -math.inf
        self._hold_beats = STAND_DOWN_BEATS if epoch else 0
        self._written = self.role  # the driver writes it first (a role file from an earlier run is stale)

    # ------------------------------------------------------------ roles

    @property
    def role(self) -> Role:
        """``fenced`` for a standby not fit to take over yet: one that does not hold what its primary issued, is
        not attached, or stood down for a newer epoch whose primary it does not follow yet (it stays fenced
        if that primary stands down in turn: then its keepalived gives the address up, and the peer's host,
        whose primary stood down, takes it and is promoted)."""
        if self.primary:
            return Role.PRIMARY
        if self._now < self._hold_until or self._hold_beats:
            return Role.FENCED
        follower = self.follower
        if self._fenced_by:
            if follower.primary is None or follower.stood_down or follower.epoch < self._fenced_by \
                    or not follower.fit:
                return Role.FENCED
            self._fenced_by = 0
        return Role.STANDBY if follower.fit else Role.FENCED

    def _clock(self, now: float) -> None:
        if self._hold_until == math.inf:
            self._hold_until = now + STAND_DOWN_HOLD
        self._now = max(self._now, now)

    def _hold(self, now: float) -> None:
        """Say ``fenced`` for STAND_DOWN_HOLD from ``now``, and for STAND_DOWN_BEATS heartbeats."""
        self._hold_until = max(self._hold_until, now + STAND_DOWN_HOLD)
        self._hold_beats = STAND_DOWN_BEATS

    def _note_role(self) -> None:
        """Ask for the role to be written when it changed (keepalived's check reads it)."""
        role = self.role
        if role != self._written:
            self._written = self._out.role = role

    def promote(self, now: float, durable: int) -> Actions:
        """SIGUSR1: take over, unless already primary, or refused while a primary that does not wait for this
        member's grants is alive (it goes on issuing numbers until it hears the new epoch: the same numbers)."""
        self._clock(now)
        if not self.primary:
            if self._live_ungated_primary(now):
                self.counters["pair promotions refused"] += 1
                # `fenced` for a while: a keepalived that made this host master gives the address up again
                self._hold(now)
                self._note_role()
            else:
                self._promote(now, durable)
        return self._take()

    def _live_ungated_primary(self, now: float) -> bool:
        """Whether it follows a primary heard within the standby timeout that does not have it attached: that
        primary issues numbers no grant of this member bounds (a standby restarted or paused meanwhile).  Its
        role is ``fenced`` then, so keepalived does not elect it; this refuses an operator's (or a late)
        SIGUSR1 too.  Heard longer ago, that primary is gone, and a promotion answers what it cannot account
        for as every promotion does."""
        follower = self.follower
        primary = follower.primary
        return primary is not None and not follower.stood_down and not primary.flags & frames.STATE_ATTACHED \
            and now - follower.heard < self.timeout

    def _peer_primary(self) -> bool:
        """Whether the peer was, when last heard, a primary that had not stood down.  A member promoted over it
        does not wait for its grants: that primary's own grants bound what it issues, and it stands down at this
        member's first STATE."""
        follower = self.follower
        return follower.primary is not None and not follower.stood_down

    def demote(self, now: float) -> Actions:
        """SIGUSR2: stand by, unless already standby."""
        self._clock(now)
        if self.primary:
            self._demote()
            self._note_role()
        return self._take()

    def _promote(self, now: float, durable: int) -> None:
        backbone = self.backbone
        self.durable = max(self.durable, durable)
        self.follower.persisted_up_to(self.durable)
        plan = self.follower.takeover(now, max(UNACCOUNTED, MAX_GRANT, backbone.sequence.block))
        epoch = max(self.epoch + 1, plan.epoch)  # above its own earlier epochs too
        self.epoch = epoch + (epoch % 2 != self._parity)  # of its own parity: the two never take the same one
        self._out.epoch = self.epoch
        backbone.sequence = SequenceCounter(plan.start - 1, backbone.sequence.block)
        if plan.start - 1 > self.durable:
            # a start above this member's own mark (it came from the peer's grants or reservation): the counter's
            # last issued is start - 1 from now on, and the driver sends nothing its state file does not cover
            # (the backbone stops with an error instead), so that file gets it first
            self._out.grant = plan.start - 1
        self._delivered = self._sent = plan.start - 1
        unknown, reopen = plan.unknown, plan.reopen
        first = reopen or unknown
        if first is not None:
            self._answered = (first[0] - 1, now + (0.0 if plan.never_sent and reopen is None else RECOVERY_WINDOW),
                              self.counters["gone answers"])
            self._told_at = None
            self._delivered = first[0] - 1
            self._open = (first[0], plan.start - 1)
            self._open_never_sent = plan.never_sent and reopen is None
        self._hold_tagged(plan.start)
        if plan.resend is not None:
            backbone.send_to_subscribers([bytes(frame) for _, frame in backbone.recent.frames(*plan.resend)], now)
        # a recovery of an earlier promotion still open (it stood down within the window) ends now: what the
        # journals did not answer is GONE (a new recovery would replace it, and its subscribers would wait)
        backbone.end_recovery(now + RECOVERY_WINDOW)
        # (what it holds and sent again just now, or sent itself, between the two ranges is not GONE)
        sent = plan.resend if reopen is None or unknown is None else (reopen[1] + 1, unknown[0] - 1)
        asked = None
        if plan.never_sent:
            if reopen is not None:
                asked = reopen
            if unknown is not None:
                for low, high in _outside(unknown, sent):
                    backbone.declare_gone(low, high, codec.GONE_NEVER_SENT, now)
        elif first is not None:
            asked = (first[0], (unknown or first)[1])
        if asked is not None:
            # the journals and the peer: an earlier primary (demoted, fenced) may hold its last messages alone,
            # sent over a link cut to the clients or to nobody before it stood down
            backbone.recover(*asked, self.service, now, sent=sent, peer=True)
        self._asking = asked
        if asked is not None:
            self._out.to_peer.append(self._seal(frames.encode_recover(self.epoch, *asked)))
        self.source = ReplicationSource(self.epoch, sync=self.sync, timeout=self.timeout)
        if now - self._peer_heard < self.timeout and not self._peer_primary():
            # the peer stood by: it may be promoted in this same instant, its adverts and pair datagrams cut
            self.source.expect(self._peer_heard)
        for record in self._tagged:
            self.source.keep(record.first, record.last, [frames.encode_record(
                record.epoch, record.first, record.last, record.source, record.runs, record.frames)])
        backbone.replicas = []
        backbone.peer_asks = []
        self.primary = True
        self._fenced_by = 0
        self.counters["pair takeovers"] += 1
        self._note_role()
        self._heartbeat(now)

    def _hold_tagged(self, start: int) -> None:
        """Put the messages of the tagged RECORDs it took that its recent log lacks (above all it holds, below
        ``start``) into it: promoted, it CONFIRMs a retry of one with its number, so it must answer a REQUEST
        for that number too (the member that sequenced them may have dropped them, demoted, or died)."""
        recent = self.backbone.recent
        lacking: list[frames.Record] = []
        for record in reversed(self._tagged):
            if record.last >= start or (lacking and record.last >= lacking[-1].first):
                continue
            if recent.frames(record.first, start - 1):
                break  # it holds this one, or numbers above it: the rest it holds or cannot add in order
            lacking.append(record)
        recent.add([LogEntry(memoryview(record.frames), record.last - record.first + 1)
                    for record in reversed(lacking)])

    def _demote(self) -> None:
        self._hold(self._now)
        self.counters["pair held output dropped"] += sum(len(sends) for _, sends, _ in self._held)
        for _, _, tagged in self._held:  # not CONFIRMed: publishers send again, and get new numbers
            self._forget(tagged)
        # ... so neither they nor a flush sequenced but not gated yet are ever DELIVERed from its recent log
        self.backbone.recent.drop_after(self._sent)
        self._held.clear()
        if self.source is not None:
            self._sent_records = self.source.records_through(self._sent)
        self.source = None
        self.backbone.replicas = None
        self.backbone.peer_asks = None
        self.follower = ReplicaFollower(self.epoch, self.durable, issued=self.backbone.sequence.last_issued,
                                        delivered=self._sent, reopen=self._open if self._answered else None)
        self._answered = self._open = self._asking = None
        self._wanted = 0
        self.primary = False

    def _fence(self, epoch: int) -> None:
        self.counters["pair fenced"] += 1
        self._fenced_by = epoch
        self._demote()
        self.counters["pair held output dropped"] += len(self._out.to_clients)
        self._out.to_clients.clear()  # released by an ACK in the same read: the newer primary resends it
        self.follower.newer(epoch)
        self._follow_epoch(epoch)
        self._note_role()

    # ------------------------------------------------------------ input

    def receive(self, datagrams: Sequence[tuple[bytes, Address]], now: float, durable: int) -> Actions:
        """Pair datagrams as read, with their sources; ``durable`` is the state file's mark now."""
        self._clock(now)
        self.durable = max(self.durable, durable)
        for data, source in datagrams:
            self._datagram(data, source, now)
        if self._acked:
            self._acked = False
            self.follower.persisted_up_to(self.durable)
            self._out.to_peer.append(self._seal(self.follower.ack()))
        self._note_role()
        return self._take()

    def _datagram(self, data: bytes, source: Address, now: float) -> None:
        if source != self.peer:
            self.counters["drop:pair foreign source"] += 1
            return
        if self.key is not None:
            opened = frames.unseal(data, self.key)
            if opened is None:
                self.counters["drop:pair bad digest"] += 1
                return
            data = opened
        if data and data[0] == codec.DELIVER:  # the peer's answer to this member's RECOVER
            if self.primary:
                self.backbone.recovered_from_peer(data, now)
            else:
                self.counters["drop:pair unasked deliver"] += 1
            return
        frame = frames.decode(data)
        if isinstance(frame, str):
            self.counters["drop:pair " + frame] += 1
            return
        self._peer_heard = now
        self._acked |= self._take_frame(frame, now)

    def _take_frame(self, frame: frames.PairFrame, now: float) -> bool:
        """Apply one pair frame; True when the standby owes an ACK."""
        if self.primary:
            source = self.source
            assert source is not None
            if frame.epoch > self.epoch or (isinstance(frame, frames.State) and frame.role == frames.ROLE_PRIMARY
                                            and frame.epoch == self.epoch and self.peer > self.address):
                self._fence(frame.epoch)  # a newer epoch exists: stop at once, follow it
                return self._take_frame(frame, now)
            if frame.epoch != self.epoch:
                self.counters["drop:pair old epoch"] += 1
            elif isinstance(frame, frames.Ack):
                source.on_ack(frame, self.backbone.sequence.last_issued, now)
                self._release()
            elif isinstance(frame, frames.Record):
                self._recovered_record(frame, now)
            elif isinstance(frame, frames.Replay):
                records = source.replay(frame)
                self.counters["pair replayed"] += len(records)
                self._out.to_peer += [self._seal(record) for record in records]
            return False
        follower = self.follower
        if isinstance(frame, frames.Recover):
            self._answer_recover(frame)
            return False
        if isinstance(frame, frames.State) and frame.role == frames.ROLE_STANDBY:
            follower.on_peer_mark(frame.last_issued)  # whatever its epoch: numbers are numbers
            return False
        if isinstance(frame, frames.Record) and follower.tags_only(frame):
            # CONFIRMed before this standby followed: a retry promoted gets its number
            self.backbone.confirmed.remember_runs(frame.source, frame.runs, now)
            self._keep_tagged(frame)
            return False
        if frame.epoch < follower.epoch:
            self.counters["drop:pair old epoch"] += 1
            return False
        if isinstance(frame, frames.State) and frame.role == frames.ROLE_PRIMARY:
            if follower.newer(frame.epoch):
                self._follow_epoch(frame.epoch)
                if frame.flags & frames.STATE_NEVER_SENT:
                    self._forget_tagged_above(frame.delivered)
                    # ... and the messages of an earlier epoch's RECORDs there: promoted, it must not DELIVER them
                    # (the publishers' retries got other numbers)
                    self.backbone.recent.drop_after(frame.delivered)
            follower.on_state(frame, now)
            self._adopt(frame, now)
            if frame.want > self._wanted:
                self._wanted = frame.want
                self._out.grant = frame.want
            return True
        if isinstance(frame, frames.Ack):
            if follower.on_peer_ack(frame):
                self._hold(now)
            self._follow_epoch(follower.epoch)
            return False
        if isinstance(frame, frames.Record) and frame.epoch == follower.epoch:
            for record in follower.on_record(frame, now):
                self.backbone.hold_replica(record.frames, record.last - record.first + 1, record.source,
                                           record.runs, now)
                self._keep_tagged(record)
            # a sync primary holds its output until this ACK; an asynchronous one only needs the heartbeat's
            # (an ACK per RECORD would wake it once more per flush for nothing)
            return follower.primary is not None and bool(follower.primary.flags & frames.STATE_SYNC)
        return False

    def _answer_recover(self, frame: frames.Recover) -> None:
        """A promoted peer asks for numbers its takeover cannot account for; this member may hold them alone (the
        earlier primary, whose last messages went over a link cut to the clients).  It answers with RECORDs of
        the peer's epoch where it has them (what it sent as primary, what it took with tags as standby), so the
        peer learns their tags with the messages (a retry gets the same number), and with DELIVER frames, as a
        journal answers, for the other numbers it holds."""
        low, high = frame.from_seq, frame.to_seq
        records = [record for record in map(frames.decode, self._sent_records)
                   if isinstance(record, frames.Record) and record.first <= high and record.last >= low]
        records += [record for record in self._tagged if record.first <= high and record.last >= low]
        covered: set[int] = set()
        answer = []
        for record in records:
            covered.update(range(record.first, record.last + 1))
            answer.append(frames.encode_record(frame.epoch, record.first, record.last, record.source, record.runs,
                                               record.frames))
        held = [bytes(data) for seq, data in self.backbone.recent.frames(low, high) if seq not in covered]
        limit = frames.MAX_BODY if self.key is not None else codec.MAX_DATAGRAM
        answer += codec.pack_greedy(held, limit) if held else []
        self.counters["pair recovered answers"] += len(held) + len(covered)
        self._out.to_peer += [self._seal(datagram) for datagram in answer]

    def _recovered_record(self, record: frames.Record, now: float) -> None:
        """A RECORD of its own epoch from the peer: its answer to this member's RECOVER (at its takeover, or for
        numbers a subscriber REQUESTed).  The messages go to the recovery or to the requester, the tags of the
        takeover's range into the CONFIRM memory (a publisher's retry gets the number they were given)."""
        if not self.backbone.recovered_from_peer(record.frames, now):
            self.counters["drop:pair unasked record"] += 1
            return
        runs = frames.clip_runs(record.runs, *self._asking) if self._asking is not None else []
        if runs:
            self.backbone.confirmed.remember_runs(record.source, runs, now)

    def _keep_tagged(self, record: frames.Record) -> None:
        """Keep a RECORD whose tags it took, within TAGGED_BYTES and UNACCOUNTED numbers of the newest."""
        if not record.runs:
            return
        tagged = self._tagged
        tagged.append(record)
        self._tagged_bytes += len(record.frames)
        while tagged and (self._tagged_bytes > TAGGED_BYTES or tagged[0].last <= record.last - UNACCOUNTED):
            self._tagged_bytes -= len(tagged.popleft().frames)

    def _forget_tagged_above(self, delivered: int) -> None:
        """A newer primary declared every number above ``delivered`` never sent: the tags this member took for
        them from an earlier epoch's RECORDs would CONFIRM a retry with a number nobody has."""
        kept: deque[frames.Record] = deque()
        for record in self._tagged:
            if record.last > delivered:
                self._forget([(record.source, frames.clip_runs(record.runs, delivered + 1, record.last))])
            if record.first > delivered:
                self._tagged_bytes -= len(record.frames)
            else:
                kept.append(record)
        self._tagged = kept

    def _follow_epoch(self, epoch: int) -> None:
        """A standby that follows a newer primary writes its epoch too: restarted without the primary's state
        directory, the pair still knows it, and the next promotion goes above it."""
        if epoch > self.epoch:
            self.epoch = self._out.epoch = epoch

    def _adopt(self, state: frames.State, now: float) -> None:
        clients = self.backbone.clients
        for member in state.members:
            clients.adopt(member.addr, member.flags, now - member.age_ms / 1000.0 + clients.lifetime)

    # ------------------------------------------------------------ the primary's output

    def replicate(self) -> Actions:
        """The primary's flush, first half: the RECORDs of what was just sequenced, for the standby, kept for
        REPLAYs.  The driver sends them, takes what the peer sent meanwhile (:meth:`receive`), then passes the
        output to :meth:`gate`."""
        source = self.source
        replicas = self.backbone.replicas
        if source is not None and replicas:
            records = []
            for entry, publisher, runs in replicas:
                first = int.from_bytes(entry.view[3:codec.FRAME_HEADER], "big")
                encoded = frames.records_for(self.epoch, entry, first, publisher, runs)
                if runs:
                    self._flushed.append((publisher, runs))
                source.keep(first, first + entry.count - 1, encoded)
                records += encoded
            replicas.clear()
            self.counters["pair records"] += len(records)
            self._out.to_peer += [self._seal(record) for record in records]
        return self._take()

    def gate(self, sends: list[Send], now: float) -> Actions:
        """The primary's flush, second half: the output goes now, or is held until the standby allows it; a
        member no longer primary (a newer epoch arrived meanwhile) drops it (nothing was CONFIRMed)."""
        source = self.source
        tagged, self._flushed = self._flushed, []
        if not self.primary or source is None:
            self.counters["pair held output dropped"] += len(sends)
            self._forget(tagged)
            return self._take()
        last = self.backbone.sequence.last_issued
        if self._held or not source.releasable(last):
            self._held.append((last, sends, tagged))
            if source.want(last, now) > self._wanted:
                self._heartbeat(now)
            self._release()
        else:
            self._out.to_clients += sends
            self._sent_through(last)
        return self._take()

    def _release(self) -> None:
        source = self.source
        held = self._held
        while held and source is not None and source.releasable(held[0][0]):
            through, sends, _ = held.popleft()
            self._out.to_clients += sends
            self._sent_through(through)

    def _sent_through(self, through: int) -> None:
        self._sent = max(self._sent, through)
        answered = self._answered
        if answered is not None:
            # answered once the window ended, a GONE left for a subscriber (told at once, or in answer to its
            # REQUEST), and a subscriber was heard after that (the GONE had a way to it: a cut link loses it).
            # Until then a standby promoted meanwhile answers those numbers in turn; with no subscriber known
            # yet, the GONE waits for their REQUESTs
            if self._now < answered[1] or self.counters["gone answers"] <= answered[2]:
                through = min(through, answered[0])
            elif self._told_at is None:
                self._told_at = self._now
                through = min(through, answered[0])
            elif not self._subscriber_heard_since(self._told_at):
                through = min(through, answered[0])
            else:
                self._answered = self._open = None
        self._delivered = through

    def _subscriber_heard_since(self, when: float) -> bool:
        now = self._now
        return any(age < now - when for _, flags, age in self.backbone.clients.members(now)
                   if not flags & codec.FLAG_NOSUBSCRIBE)

    def _forget(self, tagged: list[Tagged]) -> None:
        """The numbers of output that never left will never be DELIVERed: forget their tags (a retry gets a new
        number, where a CONFIRM of the old one would promise a message nobody has)."""
        confirmed = self.backbone.confirmed
        if isinstance(confirmed, ConfirmCache):  # (the pair runs in the single-process backbone only)
            for publisher, runs in tagged:
                confirmed.forget_runs(publisher, runs)

    @property
    def holding(self) -> int:
        """Flushes of output held back."""
        return len(self._held)

    # ------------------------------------------------------------ time

    def handle_timers(self, now: float, durable: int) -> Actions:
        """Timers: heartbeats, detaching a silent standby, REPLAY requests, grants persisted, the role."""
        self._clock(now)
        self.durable = max(self.durable, durable)
        if self.primary:
            source = self.source
            assert source is not None
            if source.handle_timers(now):
                self.counters["pair standby detached"] += 1
                self._release()
            if now >= self._next_state:
                self._heartbeat(now)
            self._ask_peer()
        else:
            follower = self.follower
            self._out.to_peer += [self._seal(replay) for replay in follower.replays(now)]
            granted = follower.granted
            follower.persisted_up_to(self.durable)
            if now >= self._next_state or follower.granted > granted:  # a grant persisted: tell the primary now
                if now >= self._next_state and self._hold_beats:
                    self._hold_beats -= 1
                self._next_state = now + STATE_EVERY
                self._out.to_peer.append(self._seal(follower.ack()))
                if follower.primary is None:  # alone: the peer learns this side's mark (a STATE of a standby)
                    mark = max(self.durable, follower.persisted, self.backbone.sequence.last_issued)
                    self._out.to_peer += [self._seal(state) for state in frames.encode_state(
                        follower.epoch, frames.ROLE_STANDBY, 0, mark, mark, 0, 0, [])]
        self._note_role()
        return self._take()

    def _ask_peer(self) -> None:
        """The numbers subscribers REQUESTed that neither the journals nor this primary's recent log answered: the
        peer may hold them alone (an earlier primary's last messages, sent over a link cut to the clients, below
        what its takeover asked for), so it gets a RECOVER for them and answers as it answers a takeover."""
        asks = self.backbone.peer_asks
        if asks:
            self._out.to_peer += [self._seal(frames.encode_recover(self.epoch, low, high)) for low, high in asks]
            asks.clear()

    def next_deadline(self) -> float:
        """When the next heartbeat (STATE or ACK) is due; the driver wakes for it."""
        return self._next_state

    def _heartbeat(self, now: float) -> None:
        source = self.source
        assert source is not None
        backbone = self.backbone
        last = backbone.sequence.last_issued
        want = source.want(last, now)
        self._wanted = max(self._wanted, want)
        members: list[frames.Member] = []
        if now >= self._next_members:
            self._next_members = now + MEMBERS_EVERY
            members = [frames.Member(addr, flags, int(age * 1000)) for addr, flags, age in backbone.clients.members(now)]
        flags = source.flags() | (frames.STATE_NEVER_SENT if self._open is not None and self._open_never_sent else 0)
        states = frames.encode_state(self.epoch, frames.ROLE_PRIMARY, flags, last, self._delivered, want,
                                     source.clean_ms(now), members)
        self._out.to_peer += [self._seal(state) for state in states]
        self._next_state = now + STATE_EVERY

    # ------------------------------------------------------------ helpers

    def _seal(self, datagram: bytes) -> bytes:
        return datagram if self.key is None else frames.seal(datagram, self.key)

    def _take(self) -> Actions:
        out, self._out = self._out, Actions()
        return out

    def metrics(self, now: float) -> dict[str, float]:
        values: dict[str, float] = {"role_primary": float(self.primary), "epoch": float(self.epoch)}
        if self.source is not None:
            source = self.source
            values["standby_attached"] = float(source.attached)
            values["replication_lag_messages"] = float(source.lag(self.backbone.sequence.last_issued))
            values["replication_lag_seconds"] = max(0.0, now - source.last_ack) if source.attached else -1.0
        else:
            follower = self.follower
            behind = follower.primary.last_issued - follower.held if follower.primary is not None else 0
            values["replication_lag_messages"] = float(max(0, behind))
            values["replication_lag_seconds"] = max(0.0, now - follower.heard) if follower.primary else -1.0
        return values
