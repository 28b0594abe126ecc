"""A measuring subscriber as a pure state machine: datagrams and time in, datagrams and events out.

It does what :class:`fyrehose.Client` does for a subscriber (KEEPALIVE with
BATCH and HEAD, ordering and gap REQUESTs through :class:`SequenceTracker`, a
bounded RecentMessages that answers FORWARDs) and additionally tells, for
each sequence, whether the backbone delivered it or a peer re-delivered it
after a REQUEST: the difference between loss before and after recovery, which
the Client does not expose.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator
from itertools import groupby
from operator import itemgetter
from typing import NamedTuple, cast

from fyrehose.loadtest.account import DeliveryAccount
from fyrehose.loadtest.stamp import run_stamps
from fyrehose.loadtest.tally import RunTally
from fyrehose.protocol import codec
from fyrehose.protocol.codec import Address
from fyrehose.protocol.connection import BackboneConnection, ConnectionOptions, DeliverForm
from fyrehose.protocol.recent_messages import RecentMessages
from fyrehose.protocol.tracker import Event, Lost, Message, TrackerOptions

FLAGS = codec.FLAG_BATCH | codec.FLAG_HEAD | codec.FLAG_REDELIVERING  # subscribes and journals: peers' gaps are served from it

_seq = itemgetter(0)
_data = itemgetter(1)


class Delivery(NamedTuple):
    """Messages released together with one payload (so one phase and one latency) and one origin.

    A batch's messages share one payload, so a driver that reports runs
    (``--batch``) pays the statistics' cost per event once per run.
    """

    recovered: bool  # a peer re-delivered them after a REQUEST, not the backbone
    latency_ms: float
    messages: int
    size: int  # bytes, of all the messages


class StampedRun(NamedTuple):
    """A datagram's messages released in order, already accounted: (published_ns, count, lowest sequence) per
    stretch with one stamp."""

    stretches: list[tuple[int, int, int]]
    size: int  # bytes of each payload


Released = Event | StampedRun


class MeasuringSubscriber:
    """:class:`~fyrehose.protocol.connection.BackboneConnection` (the client's protocol state, as in
    :class:`fyrehose.Client`) plus the accounting of where each sequence came from."""

    def __init__(self, backbone: Address, account: DeliveryAccount, *, give_up_after: float,
                 journal_bytes: int = 64 << 20) -> None:
        self.backbone = backbone
        self.account = account
        self.connection = BackboneConnection(backbone, ConnectionOptions(
            flags=FLAGS, tracker=TrackerOptions(give_up_after=give_up_after), delivers=DeliverForm.UNIFORM_RUNS))
        self.tracker = self.connection.track()
        self.held = RecentMessages(journal_bytes)  # what FORWARDs are answered from
        self.stats = self.connection.stats
        self.recovered: set[int] = set()  # sequences a peer re-delivered, until they are released
        self._losses = 0  # the tracker's count of lost sequences already accounted

    @property
    def acked(self) -> bool:
        return self.connection.last_ack is not None

    def next_deadline(self) -> float:
        """When :meth:`handle_timers` next has something to do."""
        return self.connection.next_deadline()

    def handle_timers(self, now: float) -> tuple[list[bytes], list[Event]]:
        """Timers: datagrams for the backbone (KEEPALIVE, REQUESTs) and the events of holes given up."""
        sends, events = self.connection.handle_timers(now)
        self._account(events)
        return sends, events

    def receive(self, datagram: bytes, source: Address, now: float) -> tuple[list[Released], codec.Forward | None]:
        """One datagram: what it released in order, and a FORWARD to serve (only from the backbone).

        A datagram of the backbone's that continues the stream (the usual
        case) is held and accounted whole, as a :class:`StampedRun`.
        The driver calls :meth:`forward_done` once it has served (or dropped) the FORWARD.
        """
        incoming = self.connection.receive(datagram, source, now)
        stored = incoming.stored
        if stored:
            direct = incoming.from_backbone
            self.held.add_many(stored)
            self.account.arrived(stored, direct)
            if not direct:
                self.recovered.update(map(_seq, stored))
        self._account(incoming.events)
        released: list[Released] = list(incoming.events)
        for run in incoming.runs:
            self.held.add_run(run)
            stretches = run_stamps(run)
            if stretches is None:  # not only our stamped messages: message by message
                messages = list(run.messages())
                self.account.arrived(messages, True)
                released.extend(Message(seq, payload) for seq, payload in messages)
                continue
            for published, count, lowest in stretches:
                self.account.arrived_stamped(published, count, lowest, True)
            released.append(StampedRun(stretches, run.step - codec.FRAME_HEADER))
        return released, (incoming.forwards[0] if incoming.forwards else None)

    def forward_done(self, forward: codec.Forward) -> None:
        self.connection.forward_done(forward)

    def release(self, events: Iterable[Released], now_ns: int) -> list[Delivery | Lost]:
        """Take the latencies of the messages in ``events`` (released in order at ``now_ns``) into the tally.

        Returns what to report, in order: each :class:`Lost`, and each run of
        messages with one payload and one origin as a :class:`Delivery`;
        messages without our stamp are left out.
        """
        report: list[Delivery | Lost] = []
        recovered = self.recovered
        released = self.account.released
        for kind, group in groupby(events, type):
            if kind is Lost:
                report.extend(cast(Iterator[Lost], group))
                continue
            if kind is StampedRun:
                for stamped in cast(Iterator[StampedRun], group):
                    for published, count, _ in stamped.stretches:
                        latency = self.account.released_stamped(published, count, now_ns)
                        if latency is not None:
                            report.append(Delivery(False, latency, count, count * stamped.size))
                continue
            for payload, run in groupby(cast(Iterator[Message], group), _data):
                messages = list(run)
                count = len(messages)
                peers = 0
                if recovered:
                    hits = recovered.intersection(map(_seq, messages))
                    recovered.difference_update(hits)
                    peers = len(hits)
                latency = released(payload, count, now_ns)
                if latency is None:
                    continue
                if peers:
                    report.append(Delivery(True, latency, peers, peers * len(payload)))
                if count > peers:
                    report.append(Delivery(False, latency, count - peers, (count - peers) * len(payload)))
        return report

    def _account(self, events: list[Event]) -> None:
        """Losses into the account; the tracker's counter spares a look at every message when there is none."""
        if self.tracker.lost == self._losses:
            return
        self._losses = self.tracker.lost
        for event in events:
            if isinstance(event, Lost):
                self.account.lost(event.from_seq, event.to_seq)

    def finish(self, now: float) -> list[Lost]:
        """End of the run: every hole still open is given up; returns those losses.

        Messages that waited behind such a hole are released too but not
        returned: their latency would measure the end of the run, not delivery.
        """
        _, events = self.tracker.handle_timers(now + self.tracker.give_up_after)
        self._account(events)
        return [event for event in events if isinstance(event, Lost)]

    def snapshot(self) -> RunTally:
        return self.account.snapshot(self.tracker.holes)
