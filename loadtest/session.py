"""A measuring subscriber as a pure state machine: datagrams and time in, datagrams and events out.

It does what :class:`fyrehose.Client` does for a subscriber (KEEPALIVE with
BATCH and HEAD, ordering and gap REQUESTs through :class:`SequenceTracker`, a
bounded in-memory journal that answers FORWARDs) and additionally tells, for
each sequence, whether the backbone delivered it or a peer re-delivered it
after a REQUEST: the difference between loss before and after recovery, which
the Client does not expose.
"""
from __future__ import annotations

import os
from collections import Counter, deque

from fyrehose import codec
from fyrehose.addresses import Address
from fyrehose.loadtest.account import DeliveryAccount
from fyrehose.loadtest.tally import RunTally
from fyrehose.recent_messages import MemoryJournal
from fyrehose.tracker import Event, Lost, SequenceTracker

KEEPALIVE_INTERVAL = 0.5
FLAGS = codec.FLAG_BATCH | codec.FLAG_HEAD  # subscribes and journals: peers' gaps are served from it


class SubscriberSession:
    def __init__(self, backbone: Address, account: DeliveryAccount, *, give_up_after: float,
                 journal_bytes: int = 64 << 20) -> None:
        self.backbone = backbone
        self.account = account
        self.tracker = SequenceTracker(give_up_after=give_up_after)
        self.journal = MemoryJournal(journal_bytes)
        self.stats: Counter[str] = Counter()
        self.recovered: set[int] = set()  # sequences a peer re-delivered, until the driver reports them
        self.acked = False
        self._tokens: deque[bytes] = deque(maxlen=8)
        self._next_keepalive = 0.0

    def deadline(self) -> float:
        """When :meth:`poll` next has something to do."""
        tracker_deadline = self.tracker.next_deadline()
        if tracker_deadline is None:
            return self._next_keepalive
        return min(self._next_keepalive, tracker_deadline)

    def poll(self, now: float) -> tuple[list[bytes], list[Event]]:
        """Timers: datagrams for the backbone (KEEPALIVE, REQUESTs) and the events of holes given up."""
        sends = []
        if now >= self._next_keepalive:
            token = os.urandom(codec.TOKEN_SIZE)
            self._tokens.append(token)
            sends.append(codec.encode(codec.Keepalive(flags=FLAGS, token=token)))
            self._next_keepalive = now + KEEPALIVE_INTERVAL
        requests, events = self.tracker.poll(now)
        for from_seq, to_seq in requests:
            sends.append(codec.encode(codec.Request("0.0.0.0", 0, from_seq, to_seq)))
            self.stats["requests"] += 1
        self._account(events)
        return sends, events

    def receive(self, datagram: bytes, source: Address, now: float) -> tuple[list[Event], codec.Forward | None]:
        """One datagram: the events now released in order, and a FORWARD to serve (only from the backbone)."""
        if not datagram:
            self.stats["malformed"] += 1
            return [], None
        kind = datagram[0]
        if kind == codec.DELIVER:
            return self._deliver(datagram, source == self.backbone, now), None
        try:
            frames = codec.decode(datagram)
        except codec.ProtocolError:
            self.stats["malformed"] += 1
            return [], None
        frame = frames[0]
        if source != self.backbone:
            self.stats["from strangers"] += 1
        elif isinstance(frame, codec.KeepaliveAck):
            if frame.token in self._tokens:
                self.acked = True
                if frame.head:
                    self.tracker.head(frame.head, now)
        elif isinstance(frame, codec.Forward):
            return [], frame
        else:
            self.stats["unexpected"] += 1
        return [], None

    def _deliver(self, datagram: bytes, direct: bool, now: float) -> list[Event]:
        spans, error = codec.scan(datagram, codec.DELIVER)
        if error:
            self.stats["malformed"] += 1
        tracker = self.tracker
        events = []
        for start, end, seq in spans:
            if not seq:
                self.stats["malformed"] += 1
                continue
            payload = datagram[start + codec.FRAME_HEADER:end]
            duplicates = tracker.duplicates
            released = tracker.deliver(seq, payload, now)
            if tracker.duplicates != duplicates:
                continue
            self.journal.add(seq, payload)
            self.account.arrived(seq, payload, direct)
            if not direct:
                self.recovered.add(seq)
            events.extend(released)
        self._account(events)
        return events

    def _account(self, events: list[Event]) -> None:
        for event in events:
            if isinstance(event, Lost):
                self.account.lost(event.from_seq, event.to_seq)

    def finish(self, now: float) -> list[Lost]:
        """End of the run: every hole still open is given up; returns those losses.

        Messages that waited behind such a hole are released too but not
        returned: their latency would measure the end of the run, not delivery.
        """
        _, events = self.tracker.poll(now + self.tracker.give_up_after)
        self._account(events)
        return [event for event in events if isinstance(event, Lost)]

    def snapshot(self) -> RunTally:
        return self.account.snapshot(self.tracker.holes)
