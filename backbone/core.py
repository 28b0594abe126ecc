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
from fyrehose.backbone.intake import AddressPolicy, KeepaliveIn, RequestIn, read_control
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
from fyrehose.protocol.codec import Address

_SEQ_FIELD = struct.Struct(">HI")
REPEAT_WINDOW = 2.0  # a REQUEST for the same hole again within this: the FORWARDed client did not answer
MAX_ASKED = 4096  # requesters whose recent REQUESTs are remembered for that
ASKS_PER_CLIENT = 32
_ACK_PREFIX = bytes((codec.KEEPALIVE_ACK,))


def _notice(from_seq: int, to_seq: int) -> bytes:
    """A FORWARD naming 0.0.0.0:0, sent to the requester: the backbone re-DELIVERs this range itself
    (docs/protocol.md; only to clients that set FLAG_REDELIVERING)."""
    return codec.encode(codec.Forward("0.0.0.0", 0, from_seq, to_seq))


@dataclass(slots=True)
class Outbox:
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
    ) -> None:
        self.sequence = SequenceCounter(reserved, reserve_block)
        self.clients = ClientTable(client_capacity)
        # the multi-process sequencer passes a table in shared memory, which outlives it
        self.confirmed = confirmed if confirmed is not None else ConfirmCache()
        self.policy = AddressPolicy(trusted_networks)
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

    # ------------------------------------------------------------ input

    def receive(self, datagram: bytes | bytearray | memoryview, source: Address, now: float) -> None:
        """Take one datagram from ``source``; malformed or over-rate input is counted and dropped."""
        if self.rate_limiter is not None and not self.rate_limiter.allow(source[0], now):
            self._drop("rate limited")
            return
        if datagram and datagram[0] == codec.PUSH and len(datagram) <= codec.MAX_DATAGRAM:
            self.push(datagram, source, now)
            return
        accepted = read_control(datagram, source, self.policy)
        if isinstance(accepted, KeepaliveIn):
            self.keepalive(accepted, source, now)
        elif isinstance(accepted, RequestIn):
            self.request(accepted, now)
        else:
            self._drop(accepted)

    def _drop(self, reason: str) -> None:
        self.counters["drop:" + reason] += 1

    def keepalive(self, frame: KeepaliveIn, source: Address, now: float) -> None:
        """Register an accepted KEEPALIVE and queue its ACK to ``source``.

        MULTICAST counts only where there is a group: a backbone without one
        keeps unicasting to a client that asks for it.
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
        self._control.append((ack, source))

    def request(self, frame: RequestIn, now: float) -> None:
        """Turn an accepted REQUEST into a FORWARD to a random journaling client other than the requester."""
        requester = frame.requester
        self.counters["requests"] += 1
        last = self.sequence.last_issued
        if frame.from_seq > last:
            self._drop("request beyond last sequence")
            return
        to_seq = min(frame.to_seq, last, frame.from_seq + self.max_request_range - 1)
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
            held = self.recent.first
            if member is not None and member.subscribes and member.expires > now and held is not None \
                    and to_seq >= held:
                from_seq = max(frame.from_seq, held)
                if not self._redeliveries.add(requester, from_seq, to_seq, now):
                    self._drop("redelivery queue full")
                else:
                    self.counters["redelivery requests"] += 1
                    if member.flags & codec.FLAG_REDELIVERING:  # it asks again promptly instead of backing off
                        self._control.append((_notice(from_seq, to_seq), requester))
            elif journaler is None:
                self._drop("no journaling client")

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
        if tags is not None and source is not None:
            runs = [(tags.start, count, seq)] if isinstance(tags, range) else codec.pair_runs(zip(tags, range(seq, seq + count)))
            self.confirmed.remember_runs(source, runs, now)
            self._confirms.setdefault(source, []).append(confirm_block(tags, seq))
        self.counters["pushes"] += count
        self._log.append(LogEntry(memoryview(buf), count, step))

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
        if tagged:
            confirmed.remember_runs(source, codec.pair_runs(tagged), now)
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
            self._log.append(LogEntry(view, len(bounds), 0, relative))
        else:
            view = memoryview(buf)
            for start, end in bounds:
                self._log.append(LogEntry(view[start:end], 1, end - start))

    @staticmethod
    def _contiguous(bounds: list[tuple[int, int]]) -> bool:
        return all(bounds[i][1] == bounds[i + 1][0] for i in range(len(bounds) - 1))

    def _confirm(self, source: Address, tag: int, seq: int) -> None:
        self._confirms.setdefault(source, []).append(codec.encode_confirm(tag, seq))

    # ------------------------------------------------------------ output

    def pending(self) -> bool:
        return bool(self._log or self._control or self._confirms or self._redeliveries)

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

    def next_due(self, now: float) -> float | None:
        """When a flush next has re-deliveries to send although no datagram arrives; for the drivers' waits."""
        return self._redeliveries.next_due(now)

    def flush_control(self, now: float | None = None) -> Outbox:
        """The reservation to persist, then ACKs, FORWARDs and CONFIRMs (packed for BATCH clients); no DELIVERs."""
        self.keep_recent()  # a driver that never calls it still holds no more than one flush's frames
        out = Outbox()
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
            if entry is not None and entry.batches:
                sends.extend((datagram, source) for datagram in codec.pack_greedy(blocks))
            else:
                sends.extend((block[start:start + size], source)
                             for block in blocks for start in range(0, len(block), size))
            self.counters["confirms"] += sum(map(len, blocks)) // size
        self._confirms = {}
        self.counters["datagrams out"] += len(sends)
        return out

    def flush(self, now: float) -> Outbox:
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
                    sends.extend((frame, addr) for addr in plain)
        if batch or group is not None:
            if len(log) == 1 and len(log[0].view) <= self.batch_bytes:  # one datagram in, one out: as it is
                packed: list[bytes | memoryview] = [log[0].view]
            else:
                packed = [join_parts(parts) for parts in batch_parts(log, self.batch_bytes)]
            if group is not None:  # one send serves every subscriber that joined the group
                sends.extend((datagram, group) for datagram in packed)
                self.counters["multicast datagrams"] += len(packed)
            for datagram in packed:
                sends.extend((datagram, addr) for addr in batch)
        messages = log[0].count if len(log) == 1 else sum(entry.count for entry in log)
        self.counters["delivered"] += messages * (len(plain) + len(batch) + (group is not None))
        self.counters["datagrams out"] += len(sends)
        sends.extend(control)
        out.sends = sends
        return out
