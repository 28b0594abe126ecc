"""The backbone as a pure state machine: datagrams and time in, datagrams out.

Every driver (the single-process loop, the multi-process sequencer, the tests)
feeds :meth:`Backbone.receive` and sends what :meth:`Backbone.flush` returns.
Sequencing rewrites PUSH frames into DELIVER frames in place (the two share a
layout), so a packed PUSH datagram becomes a packed DELIVER datagram without
rebuilding any frame.

The multi-process backbone splits this work: receive workers classify
datagrams with the same pure functions (:mod:`fyrehose.backbone.intake`,
:func:`fyrehose.backbone.pushes.uniform_frames`), and the sequencer applies the
accepted ones through :meth:`keepalive`, :meth:`request` and :meth:`push`, then
takes the sequenced log (:meth:`take_log`) for its fan-out workers and sends
only what :meth:`flush_control` returns.
"""
from __future__ import annotations

import ipaddress
import random
import struct
from array import array
from collections import Counter, OrderedDict, deque
from dataclasses import dataclass, field

from fyrehose.backbone.clients import ClientTable
from fyrehose.backbone.confirms import ConfirmCache, ConfirmMemory
from fyrehose.backbone.cookies import CookieJar
from fyrehose.backbone.intake import AddressPolicy, CookieAnswer, KeepaliveIn, RequestIn, read_control
from fyrehose.backbone.pushes import (
    LogEntry,
    batch_parts,
    confirm_block,
    frame_tags,
    join_parts,
    stamp_uniform,
    uniform_frames,
    untagged,
)
from fyrehose.backbone.ratelimit import SourceRateLimiter
from fyrehose.backbone.recent_log import DEFAULT_BYTES, RecentLog
from fyrehose.backbone.redelivery import BYTE_RATE, DATAGRAM_RATE, Redeliveries
from fyrehose.backbone.sequence_counter import DEFAULT_BLOCK, SequenceCounter, SequenceExhausted
from fyrehose.protocol import codec
from fyrehose.protocol.codec import Address, Run

_SEQ_FIELD = struct.Struct(">HI")
REPEAT_WINDOW = 2.0  # a REQUEST for the same hole again within this: the FORWARDed client did not answer
MAX_ASKED = 4096  # requesters whose recent REQUESTs are remembered for that
ASKS_PER_CLIENT = 32
_ACK_PREFIX = bytes((codec.KEEPALIVE_ACK,))
_ZERO_TAG = bytes(codec.FRAME_HEADER - 3)  # the TAG field of an untagged PUSH
_NOBODY: Address = ("0.0.0.0", 0)  # the publisher of untagged frames, as far as a standby needs to know
RECOVERY_WINDOW = 0.2  # seconds a promoted standby waits for the journals' copies of the numbers it lacks
# a REQUEST's numbers a pair primary's recent log does not hold, asked of its peer: the peer's answer goes to the
# requester for this long, and the peer is not asked for them again meanwhile (its answer may carry 65,536 messages)
PEER_ASK_WINDOW = 1.0
MAX_PEER_ASKS = 64  # requesters whose asks of the peer are remembered at once


@dataclass(slots=True)
class Recovery:
    """Numbers a promoted standby lacks, asked of every journaling client and of its pair peer (docs/protocol.md,
    "Hot standby pair")."""

    from_seq: int
    to_seq: int
    deadline: float
    journalers: set[Address]
    found: set[int] = field(default_factory=set)
    peer: bool = False  # its pair peer was asked too: its DELIVERs come through the pair member, not the clients' socket


@dataclass(slots=True)
class PeerAsk:
    """A subscriber's REQUEST for numbers a pair primary's recent log does not hold, which its peer was asked for:
    the earlier primary may be the only one holding them (its last messages, sent over a link cut to the clients)."""

    from_seq: int
    to_seq: int
    requester: Address
    until: float


def _notice(from_seq: int, to_seq: int) -> bytes:
    """A FORWARD naming 0.0.0.0:0, sent to the requester: the backbone re-DELIVERs this range itself
    (docs/protocol.md; only to clients that set FLAG_REDELIVERING)."""
    return codec.encode(codec.Forward("0.0.0.0", 0, from_seq, to_seq))


@dataclass(slots=True)
class Flush:
    """What a driver must do, in order: persist ``reserve`` (when set; in the background is fine), make sure every
    number up to ``sequence.last_issued`` is durably reserved, then send."""

    reserve: int | None = None
    sends: list[tuple[bytes | memoryview, Address]] = field(default_factory=list)


class Backbone:
    def __init__(
        self,
        *,
        reserved: int = 0,
        reserve_block: int = DEFAULT_BLOCK,
        trusted_networks: tuple[ipaddress.IPv4Network, ...] = (),
        batch_bytes: int = codec.MAX_DATAGRAM,
        max_request_range: int = codec.MAX_REQUEST_SPAN,
        client_capacity: int = 65536,
        rng: random.Random | None = None,
        rate_limit: float = 0,
        confirmed: ConfirmMemory | None = None,
        recent_bytes: int = DEFAULT_BYTES,
        redeliver_datagrams: float = DATAGRAM_RATE,
        redeliver_bytes: float = BYTE_RATE,
        multicast: Address | None = None,
        cookies: CookieJar | None = None,
    ) -> None:
        self.sequence = SequenceCounter(reserved, reserve_block)
        self.clients = ClientTable(client_capacity)
        # the multi-process sequencer passes a table in shared memory, which outlives it
        self.confirmed = confirmed if confirmed is not None else ConfirmCache()
        # address validation (--validate-addresses, docs/protocol.md): with a cookie jar, an address outside the
        # trusted networks is sent nothing but a COOKIE until it echoes one (so no DELIVER, FORWARD, CONFIRM
        # or re-delivery), and its REQUESTs are not served
        self.cookies = cookies
        self.policy = AddressPolicy(trusted_networks, cookies)
        self.batch_bytes = max(codec.FRAME_HEADER, min(batch_bytes, codec.MAX_DATAGRAM))
        self.multicast = multicast  # the group every DELIVER datagram goes to once (--multicast), packed as for BATCH
        self.max_request_range = max_request_range
        self.rng = rng or random.Random()
        self.rate_limiter = SourceRateLimiter(rate_limit) if rate_limit else None  # datagrams/s per source IP
        self.counters: Counter[str] = Counter()
        self._log: list[LogEntry] = []  # sequenced frames not yet handed out
        self._control: list[tuple[bytes | memoryview, Address]] = []
        self._confirms: dict[Address, list[bytes]] = {}  # source -> blocks of CONFIRM frames
        # last-resort re-delivery (docs/protocol.md): the backbone's own recent messages, for REQUESTs
        # that no journaling client can answer, or that come again because none answered in time
        self._recent = RecentLog(recent_bytes)
        self._unkept: list[LogEntry] = []  # handed out, not yet copied into the recent log
        self._asked: OrderedDict[Address, deque[tuple[int, int, float]]] = OrderedDict()  # recent REQUESTs
        self._redeliveries = Redeliveries(datagram_rate=redeliver_datagrams, byte_rate=redeliver_bytes)
        # a member of a standby pair (docs/protocol.md, "Hot standby pair"): the driver sets `replicas` to a list
        # that collects every sequenced entry with its publisher and tag runs, for the standby
        self.replicas: list[tuple[LogEntry, Address, list[Run]]] | None = None
        self.gone: list[tuple[int, int, int]] = []  # (from, to, reason): numbers no one will ever deliver
        self._recovery: Recovery | None = None
        # a pair primary's member sets `peer_asks` to a list, and sends its peer a RECOVER for every range that
        # appears in it: the numbers of REQUESTs that neither a journaling client nor the recent log answered
        self.peer_asks: list[tuple[int, int]] | None = None
        self._peer_asks: list[PeerAsk] = []

    # ------------------------------------------------------------ input

    def receive(self, datagram: bytes | bytearray | memoryview, source: Address, now: float) -> None:
        """Take one datagram from ``source``; malformed or over-rate input is counted and dropped."""
        if self.rate_limiter is not None and not self.rate_limiter.allow(source[0], now):
            self._drop("rate limited")
            return
        if datagram and datagram[0] == codec.PUSH and len(datagram) <= codec.MAX_DATAGRAM:
            self.push(datagram, source, now)
            return
        if datagram and datagram[0] == codec.DELIVER and self._recovery is not None:
            self._recovered(datagram, source, now)
            return
        accepted = read_control(datagram, source, self.policy, now)
        if isinstance(accepted, KeepaliveIn):
            self.keepalive(accepted, source, now)
        elif isinstance(accepted, RequestIn):
            self.request(accepted, now)
        elif isinstance(accepted, CookieAnswer):
            self._control.append((accepted.frame, accepted.client))
            self.counters["cookies"] += 1
            if accepted.forged:
                self._drop("bad cookie")
        else:
            self._drop(accepted)

    def _drop(self, reason: str) -> None:
        self.counters["drop:" + reason] += 1

    def keepalive(self, frame: KeepaliveIn, source: Address, now: float) -> None:
        """Register an accepted KEEPALIVE and queue its ACK to ``source``.

        MULTICAST counts only where there is a group: a backbone without one
        keeps unicasting to a client that asks for it.  A KEEPALIVE whose
        cookie is of the previous slot gets a fresh one in its ACK, so a
        client that keeps talking never has to ask for one again.
        """
        flags = frame.flags if self.multicast is not None else frame.flags & ~codec.FLAG_MULTICAST
        if not self.clients.refresh(frame.client, flags, now):
            self._drop("client table full")
            return
        self.counters["keepalives"] += 1
        ack = _ACK_PREFIX + frame.token
        if frame.flags & codec.FLAG_HEAD:
            last = self.sequence.last_issued
            ack += _SEQ_FIELD.pack(last >> 32, last & 0xFFFFFFFF)
        if frame.renew and self.cookies is not None:
            ack += self.cookies.cookie(frame.client, now)
        self._control.append((ack, source))

    def request(self, frame: RequestIn, now: float) -> None:
        """Turn an accepted REQUEST into a FORWARD to a random journaling client other than the requester."""
        requester = frame.requester
        if self.cookies is not None and not self._validated(requester, now):
            self._drop("unvalidated address")  # a journaler's re-DELIVERs would go to an address nobody vouched for
            return
        self.counters["requests"] += 1
        last = self.sequence.last_issued
        if frame.from_seq > last:
            self._drop("request beyond last sequence")
            return
        to_seq = min(frame.to_seq, last, frame.from_seq + self.max_request_range - 1)
        if self.gone and self._answer_gone(requester, frame.from_seq, to_seq):
            return
        journaler = self.clients.choose_journaler(now, requester, self.rng)
        repeated = self._asked_again(requester, frame.from_seq, to_seq, now)
        if journaler is not None:
            forward = codec.Forward(requester[0], requester[1], frame.from_seq, to_seq)
            self._control.append((codec.encode(forward), journaler))
            self.counters["forwards"] += 1
        if journaler is None or repeated:
            # only to a live subscriber: it gets these messages anyway, so a spoofed REQUEST from
            # anyone else cannot make the backbone send more than it was sent (tests/backbone/test_abuse.py)
            member = self.clients.get(requester)
            live = member is not None and member.subscribes and member.expires > now
            held = self.recent.first
            asked = False
            if live and self.peer_asks is not None:
                for low, high in self._unheld(frame.from_seq, to_seq):
                    self._ask_peer(requester, low, high, now)
                    asked = True
            if member is not None and live and held is not None and to_seq >= held:
                from_seq = max(frame.from_seq, held)
                if not self._redeliveries.add(requester, from_seq, to_seq, now):
                    self._drop("redelivery queue full")
                else:
                    self.counters["redelivery requests"] += 1
                    if member.flags & codec.FLAG_REDELIVERING:  # it asks again promptly instead of backing off
                        self._control.append((_notice(from_seq, to_seq), requester))
            elif journaler is None and not asked:
                self._drop("no journaling client")

    def _unheld(self, from_seq: int, to_seq: int) -> list[tuple[int, int]]:
        """The ranges within ``from_seq..to_seq`` that the recent log does not hold and that are not GONE: a number
        declared never sent may still be in the peer's log (output its primary dropped), under a message whose
        retry got another number."""
        held = [seq for seq, _ in self.recent.frames(from_seq, to_seq)]
        skip = sorted([(max(first, from_seq), min(last, to_seq)) for first, last, _ in self.gone
                       if first <= to_seq and last >= from_seq] + [(seq, seq) for seq in held])
        gaps = []
        expected = from_seq
        for first, last in skip:
            if first > expected:
                gaps.append((expected, first - 1))
            expected = max(expected, last + 1)
        if expected <= to_seq:
            gaps.append((expected, to_seq))
        return gaps

    def _ask_peer(self, requester: Address, from_seq: int, to_seq: int, now: float) -> None:
        """Numbers a live subscriber asked for again that this pair primary does not hold: the peer is asked for
        them (unless a live ask covers them already) and its answer goes to the requester."""
        asks = [ask for ask in self._peer_asks if ask.until > now]
        if any(ask.requester == requester and ask.from_seq <= to_seq and from_seq <= ask.to_seq for ask in asks):
            self._peer_asks = asks  # asked within the window: the answer is on its way (or lost: asked after it)
            return
        if len(asks) >= MAX_PEER_ASKS:
            self._peer_asks = asks
            self._drop("peer asks full")
            return
        if not any(ask.from_seq <= from_seq and to_seq <= ask.to_seq for ask in asks) and self.peer_asks is not None:
            self.peer_asks.append((from_seq, to_seq))
            self.counters["peer asks"] += 1
        asks.append(PeerAsk(from_seq, to_seq, requester, now + PEER_ASK_WINDOW))
        self._peer_asks = asks

    def _validated(self, addr: Address, now: float) -> bool:
        """With address validation: whether ``addr`` is a live client (it echoed a cookie, or is trusted)."""
        member = self.clients.get(addr)
        return (member is not None and member.expires > now) or self.policy.trusted(addr[0])

    def _answer_gone(self, requester: Address, from_seq: int, to_seq: int) -> bool:
        """GONE frames for the requested numbers no one will deliver, to a client that takes them; True when
        they cover the whole request."""
        member = self.clients.get(requester)
        if member is None or not member.flags & codec.FLAG_GONE:
            return False
        covered = 0
        for first, last, reason in self.gone:
            low, high = max(first, from_seq), min(last, to_seq)
            if low <= high:
                self._control.append((codec.encode_gone(low, high, reason), requester))
                covered += high - low + 1
                self.counters["gone answers"] += 1
        return covered == to_seq - from_seq + 1

    def recover(self, from_seq: int, to_seq: int, requester: Address, now: float,
                window: float = RECOVERY_WINDOW, sent: tuple[int, int] | None = None, peer: bool = False) -> None:
        """After a takeover: ask every journaling client for ``from_seq..to_seq`` on behalf of ``requester`` (this
        backbone's own address); what arrives within ``window`` goes to every subscriber, the rest is GONE.
        ``sent`` is a range within it that this backbone holds and sent again itself: found already.  With
        ``peer`` the pair member asks its peer too, and hands its answer to :meth:`recovered_from_peer`."""
        journalers = self.clients.journalers(now)
        forward = codec.encode(codec.Forward(requester[0], requester[1], from_seq, to_seq))
        self._control.extend((forward, journaler) for journaler in journalers)
        self.counters["forwards"] += len(journalers)
        found = set(range(max(from_seq, sent[0]), min(to_seq, sent[1]) + 1)) if sent is not None else set()
        self._recovery = Recovery(from_seq, to_seq, now + window, set(journalers), found, peer)

    def _recovered(self, datagram: bytes | bytearray | memoryview, source: Address, now: float) -> None:
        recovery = self._recovery
        assert recovery is not None
        if source not in recovery.journalers:
            self._drop("unasked deliver")
            return
        spans, error = codec.scan(datagram, codec.DELIVER)
        if error is not None:
            self._drop("malformed")
        self._take_recovered(recovery, datagram, spans, now)

    def recovered_from_peer(self, datagram: bytes | bytearray | memoryview, now: float) -> bool:
        """The pair peer's DELIVERs in answer to a recovery that asked it, or to its asks for REQUESTed numbers
        (they go to their requesters); False when nothing asked it.  They arrive on the pair socket, which
        takes only the peer's datagrams (sealed, with a pair key), never on the clients' socket."""
        recovery = self._recovery
        asks = [ask for ask in self._peer_asks if ask.until > now]
        self._peer_asks = asks
        if (recovery is None or not recovery.peer) and not asks:
            self._drop("unasked deliver")
            return False
        spans, error = codec.scan(datagram, codec.DELIVER)
        if error is not None:
            self._drop("malformed")
        for ask in asks:
            answer = [bytes(datagram[start:end]) for start, end, seq in spans if ask.from_seq <= seq <= ask.to_seq]
            if answer:
                self._relay(ask.requester, answer)
        if recovery is not None and recovery.peer:
            self._take_recovered(recovery, datagram, spans, now)
        return True

    def _relay(self, addr: Address, frames: list[bytes]) -> None:
        """The peer's DELIVER frames to the subscriber that REQUESTed them, packed if it takes BATCH."""
        entry = self.clients.get(addr)
        if entry is not None and entry.batches:
            self._control.extend((datagram, addr) for datagram in codec.pack_greedy(frames, self.batch_bytes))
        else:
            self._control.extend((frame, addr) for frame in frames)
        self.counters["peer answers relayed"] += len(frames)

    def _take_recovered(self, recovery: Recovery, datagram: bytes | bytearray | memoryview,
                        spans: list[tuple[int, int, int]], now: float) -> None:
        fresh = []
        kept: list[tuple[int, bytes]] = []
        for start, end, seq in spans:
            if recovery.from_seq <= seq <= recovery.to_seq and seq not in recovery.found:
                recovery.found.add(seq)
                frame = bytes(datagram[start:end])
                fresh.append(frame)
                if not kept or seq > kept[-1][0]:
                    kept.append((seq, frame))
        if kept:
            self._keep_recovered(kept)
        self.counters["recovered"] += len(fresh)
        self.send_to_subscribers(fresh, now)

    def _keep_recovered(self, kept: list[tuple[int, bytes]]) -> None:
        """Recovered frames (ascending) kept in the recent log too: a subscriber that missed them asks this
        backbone for them later, and a number found is not declared GONE, so nothing else would answer it.  The
        log holds its numbers in order, so what it took since the takeover above them is taken out and added
        again behind them (a recovery ends within RECOVERY_WINDOW of the takeover: a few entries)."""
        recent = self.recent
        above = [(seq, bytes(frame)) for seq, frame in recent.frames(kept[0][0], codec.MAX_SEQUENCE)]
        recent.drop_after(kept[0][0] - 1)
        below = recent.frames(kept[0][0], codec.MAX_SEQUENCE)  # an entry that began below and reaches here
        floor = below[-1][0] if below else 0
        merged = sorted({seq: frame for seq, frame in above + kept if seq > floor}.items())
        recent.add([LogEntry(memoryview(frame), 1) for _, frame in merged])

    def hold_replica(self, frames: bytes, count: int, source: Address, runs: list[Run], now: float) -> None:
        """A standby keeps what its primary sequenced: the frames in its recent log (for REQUESTs after a
        takeover), the tags in its CONFIRM memory (a retried PUSH gets its original number)."""
        if runs:
            self.confirmed.remember_runs(source, runs, now)
        self.keep_recent()
        self._recent.add([LogEntry(memoryview(frames), count)])
        self.counters["replicated"] += count

    def send_to_subscribers(self, frames: list[bytes], now: float) -> None:
        """DELIVER frames sequenced before (recovered or held at a takeover) to every subscriber, apart from the
        sequenced log, packed for BATCH subscribers."""
        if not frames:
            return
        plain, batch = self.clients.subscribers(now)
        for addr in plain:
            self._control.extend((frame, addr) for frame in frames)
        if batch:
            packed = codec.pack_greedy(frames, self.batch_bytes)
            for addr in batch:
                self._control.extend((datagram, addr) for datagram in packed)
        self.counters["resent"] += len(frames) * (len(plain) + len(batch))

    def end_recovery(self, now: float) -> None:
        """Once the window is over: every number not found is GONE (lost)."""
        recovery = self._recovery
        if recovery is None or now < recovery.deadline:
            return
        self._recovery = None
        start = None
        for seq in range(recovery.from_seq, recovery.to_seq + 2):
            missing = seq <= recovery.to_seq and seq not in recovery.found
            if missing and start is None:
                start = seq
            elif not missing and start is not None:
                self.declare_gone(start, seq - 1, codec.GONE_LOST, now)
                self.counters["gone"] += seq - start
                start = None

    def declare_gone(self, from_seq: int, to_seq: int, reason: int, now: float) -> None:
        """Numbers nobody will deliver: every subscriber that takes GONE is told at once (its REQUESTs for them
        are answered so too), instead of waiting for them until it gives up."""
        self.gone.append((from_seq, to_seq, reason))
        frame = codec.encode_gone(from_seq, to_seq, reason)
        told = [(frame, addr) for addr, flags, _ in self.clients.members(now)
                if flags & codec.FLAG_GONE and not flags & codec.FLAG_NOSUBSCRIBE]
        self._control.extend(told)
        self.counters["gone answers"] += len(told)

    def _asked_again(self, requester: Address, from_seq: int, to_seq: int, now: float) -> bool:
        """Whether ``requester`` asked for any of these sequences within REPEAT_WINDOW; remembers this ask.

        A client asks again for what it still misses (a hole may have shrunk
        meanwhile), so any overlap counts as asking again.
        """
        asks = self._asked.pop(requester, None)
        if asks is None:
            asks = deque(maxlen=ASKS_PER_CLIENT)
        horizon = now - REPEAT_WINDOW
        again = any(first <= to_seq and from_seq <= last and when > horizon for first, last, when in asks)
        asks.append((from_seq, to_seq, now))
        self._asked[requester] = asks
        if len(self._asked) > MAX_ASKED:
            self._asked.popitem(last=False)
        return again

    def push(self, datagram: bytes | bytearray | memoryview, source: Address, now: float) -> None:
        """Sequence the well-formed PUSH frames of a datagram (up to the first malformed one)."""
        size = len(datagram)
        if size >= codec.FRAME_HEADER and datagram[0] == codec.PUSH \
                and (datagram[1] << 8 | datagram[2]) == size - codec.FRAME_HEADER \
                and datagram[3:codec.FRAME_HEADER] == _ZERO_TAG:
            self._push_one(datagram, size)  # one untagged frame: the latency path at low rates
            return
        step = uniform_frames(datagram)
        if step:
            if untagged(datagram, step):
                self._push_uniform(datagram, step)
                return
            tags = frame_tags(datagram, step)  # a range (distinct, none 0) for a publisher's usual batch
            if (isinstance(tags, range) or 0 not in tags and len(set(tags)) == len(tags)) \
                    and not self.confirmed.known(source, tags):
                self._push_uniform(datagram, step, tags, source, now)
                return
        spans, error = codec.scan(datagram, codec.PUSH)
        if error is not None:
            self._drop("malformed")
        if spans:
            self._push_spans(datagram, spans, source, now)

    def _push_one(self, datagram: bytes | bytearray | memoryview, size: int) -> None:
        """One untagged PUSH frame sequenced: what :meth:`_push_uniform` does for it, without its column work."""
        try:
            seq = self.sequence.take(1)
        except SequenceExhausted:
            self._drop("sequence space exhausted")
            return
        buf = bytearray(datagram)
        buf[0] = codec.DELIVER
        buf[3:codec.FRAME_HEADER] = seq.to_bytes(6, "big")
        self.counters["pushes"] += 1
        entry = LogEntry(memoryview(buf), 1, size)
        self._log.append(entry)
        if self.replicas is not None:
            self.replicas.append((entry, _NOBODY, []))

    def _push_uniform(self, datagram: bytes | bytearray | memoryview, step: int, tags: array | range | None = None,
                      source: Address | None = None, now: float = 0.0) -> None:
        """Frames of one size sequenced without a loop per frame; with ``tags`` (fresh, distinct, from
        ``source``) also remembered and confirmed."""
        count = len(datagram) // step
        try:
            seq = self.sequence.take(count)
        except SequenceExhausted:
            self._drop("sequence space exhausted")
            return
        buf = bytearray(datagram)
        stamp_uniform(buf, step, seq)
        runs: list[Run] = []
        if tags is not None and source is not None:
            runs = [(tags.start, count, seq)] if isinstance(tags, range) else codec.pair_runs(zip(tags, range(seq, seq + count)))
            self.confirmed.remember_runs(source, runs, now)
            self._confirms.setdefault(source, []).append(confirm_block(tags, seq))
        self.counters["pushes"] += count
        entry = LogEntry(memoryview(buf), count, step)
        self._log.append(entry)
        if self.replicas is not None:
            self.replicas.append((entry, source or _NOBODY, runs))

    def _push_spans(self, datagram: bytes | bytearray | memoryview, spans: list[tuple[int, int, int]],
                    source: Address, now: float) -> None:
        confirmed = self.confirmed
        keep = spans
        repeated: list[int] = []  # tags seen twice within this datagram: confirmed once sequenced
        tags = [tag for _, _, tag in spans]
        if any(tags) and (0 in tags or len(set(tags)) != len(tags) or confirmed.known(source, tags)):
            keep = []
            fresh: set[int] = set()
            for span in spans:
                tag = span[2]
                seq = confirmed.lookup(source, tag) if tag else None
                if seq is not None:
                    self._confirm(source, tag, seq)
                    self.counters["duplicate pushes"] += 1
                elif tag in fresh:
                    repeated.append(tag)
                    self.counters["duplicate pushes"] += 1
                else:
                    if tag:
                        fresh.add(tag)
                    keep.append(span)
            if not keep:
                return
        try:
            seq = self.sequence.take(len(keep))
        except SequenceExhausted:
            self._drop("sequence space exhausted")
            return
        buf = bytearray(datagram[: keep[-1][1]])
        pack_seq = _SEQ_FIELD.pack_into
        deliver = codec.DELIVER
        bounds = []
        tagged = []
        for start, end, tag in keep:
            buf[start] = deliver
            pack_seq(buf, start + 3, seq >> 32, seq & 0xFFFFFFFF)
            if tag:
                tagged.append((tag, seq))
            bounds.append((start, end))
            seq += 1
        runs = codec.pair_runs(tagged) if tagged else []
        if tagged:
            confirmed.remember_runs(source, runs, now)
            self._confirms.setdefault(source, []).extend(codec.encode_confirms(tagged))
        for tag in repeated:
            first = confirmed.lookup(source, tag)
            if first is not None:  # remembered above; a full shared table may have reused the slot since
                self._confirm(source, tag, first)
        self.counters["pushes"] += len(keep)
        base = bounds[0][0]
        if len(keep) == len(spans) or self._contiguous(bounds):
            view = memoryview(buf)[base:]
            relative = bounds if not base else [(s - base, e - base) for s, e in bounds]
            entries = [LogEntry(view, len(bounds), 0, relative)]
        else:
            view = memoryview(buf)
            entries = [LogEntry(view[start:end], 1, end - start) for start, end in bounds]
        self._log += entries
        if self.replicas is not None:
            self.replicas += [(entry, source, runs) for entry in entries]

    @staticmethod
    def _contiguous(bounds: list[tuple[int, int]]) -> bool:
        return all(bounds[i][1] == bounds[i + 1][0] for i in range(len(bounds) - 1))

    def _confirm(self, source: Address, tag: int, seq: int) -> None:
        self._confirms.setdefault(source, []).append(codec.encode_confirm(tag, seq))

    # ------------------------------------------------------------ output

    def pending(self) -> bool:
        return bool(self._log or self._control or self._confirms or self._redeliveries or self._recovery)

    def take_log(self) -> list[LogEntry]:
        """The frames sequenced since the last call, for a driver that fans them out itself; it calls
        :meth:`keep_recent` once they are on their way."""
        log, self._log = self._log, []
        self._unkept += log
        return log

    def keep_recent(self) -> None:
        """Copy what was handed out since the last call into the recent log.

        Drivers call it after sending, so that the copy (about 3 us for a
        one-message datagram) is not between a message and its subscribers;
        whatever reads the log calls it first, so nothing handed out is ever
        missing from it.
        """
        if self._unkept:
            self._recent.add(self._unkept)
            self._unkept = []

    @property
    def recent(self) -> RecentLog:
        """The backbone's own copy of the messages it sequenced last, everything handed out included."""
        self.keep_recent()
        return self._recent

    def _redeliver(self, now: float) -> None:
        """Re-DELIVER queued ranges from the recent log, as far as each requester's pacing allows."""
        redeliveries = self._redeliveries
        frames = redeliveries.frames
        self._control.extend(redeliveries.take(now, self.recent, self._takes_batches, self.batch_bytes))
        self.counters["redelivered"] += redeliveries.frames - frames

    def _takes_batches(self, requester: Address) -> bool | None:
        entry = self.clients.get(requester)
        return entry.batches if entry is not None and entry.subscribes else None

    def next_deadline(self, now: float) -> float | None:
        """When a flush next has re-deliveries to send although no datagram arrives; for the drivers' waits."""
        due = self._redeliveries.next_deadline(now)
        if self._recovery is not None:
            due = self._recovery.deadline if due is None else min(due, self._recovery.deadline)
        return due

    def flush_control(self, now: float | None = None) -> Flush:
        """The reservation to persist, then ACKs, FORWARDs and CONFIRMs (packed for BATCH clients); no DELIVERs."""
        self.keep_recent()  # a driver that never calls it still holds no more than one flush's frames
        if self._recovery is not None and now is not None:
            self.end_recovery(now)
        out = Flush()
        if not (self._control or self._confirms or self._redeliveries or self.sequence.unpersisted):
            return out  # the usual flush of a subscriber's-only traffic: nothing but DELIVERs
        if self._redeliveries and now is not None:
            self._redeliver(now)
        if self.sequence.unpersisted:
            out.reserve = self.sequence.reserved
            self.sequence.unpersisted = False
        sends = out.sends
        sends.extend(self._control)
        self._control = []
        size = codec.CONFIRM_SIZE
        for source, blocks in self._confirms.items():  # each block: one or more CONFIRM frames back to back
            entry = self.clients.get(source)
            if entry is None and self.cookies is not None and not self.policy.trusted(source[0]):
                # sequenced (backbone rule 5) but not confirmed: a CONFIRM is larger than an empty PUSH; the
                # publisher's retry, once its KEEPALIVE validated it, is confirmed from the tag memory
                self._drop("unvalidated address")
                continue
            if entry is not None and entry.batches:
                sends += [(datagram, source) for datagram in codec.pack_greedy(blocks)]
            else:
                sends += [(block[start:start + size], source) for block in blocks for start in range(0, len(block), size)]
            self.counters["confirms"] += sum(map(len, blocks)) // size
        self._confirms = {}
        self.counters["datagrams out"] += len(sends)
        return out

    def flush(self, now: float) -> Flush:
        """Everything to send since the last flush, DELIVERs first.

        DELIVERs go before the ACKs and CONFIRMs of the same flush: a CONFIRM
        must not promise a message the backbone could still die before sending,
        and an ACK's HEAD must not announce sequences whose DELIVERs are still
        queued behind it (the subscriber would REQUEST them needlessly).
        """
        out = self.flush_control(now)
        if not self._log:
            return out
        control = out.sends
        sends: list[tuple[bytes | memoryview, Address]] = []
        log = self.take_log()
        plain, batch = self.clients.subscribers(now)
        group = self.multicast
        if plain:
            for entry in log:
                for frame in entry.frames():
                    sends += [(frame, addr) for addr in plain]
        if batch or group is not None:
            if len(log) == 1 and len(log[0].view) <= self.batch_bytes:  # one datagram in, one out: as it is
                packed: list[bytes | memoryview] = [log[0].view]
            else:
                packed = [join_parts(parts) for parts in batch_parts(log, self.batch_bytes)]
            if group is not None:  # one send serves every subscriber that joined the group
                sends += [(datagram, group) for datagram in packed]
                self.counters["multicast datagrams"] += len(packed)
            for datagram in packed:
                sends += [(datagram, addr) for addr in batch]
        messages = log[0].count if len(log) == 1 else sum([entry.count for entry in log])
        counters = self.counters
        counters["delivered"] += messages * (len(plain) + len(batch) + (group is not None))
        counters["datagrams out"] += len(sends)
        if control:
            sends += control
        out.sends = sends
        return out
