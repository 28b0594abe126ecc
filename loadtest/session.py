"""A measuring subscriber as a pure state machine: datagrams and time in, datagrams and events out.

It does what :class:`fyrehose.Client` does for a subscriber (KEEPALIVE with
BATCH and HEAD, ordering and gap REQUESTs through :class:`SequenceTracker`, a
bounded in-memory journal that answers FORWARDs) and additionally tells, for
each sequence, whether the backbone delivered it or a peer re-delivered it
after a REQUEST: the difference between loss before and after recovery, which
the Client does not expose.
"""
from __future__ import annotations

from fyrehose import codec
from fyrehose.addresses import Address
from fyrehose.connection import BackboneConnection
from fyrehose.loadtest.account import DeliveryAccount
from fyrehose.loadtest.tally import RunTally
from fyrehose.recent_messages import MemoryJournal
from fyrehose.tracker import Event, Lost

KEEPALIVE_INTERVAL = 0.5
FLAGS = codec.FLAG_BATCH | codec.FLAG_HEAD  # subscribes and journals: peers' gaps are served from it


class SubscriberSession:
    """:class:`~fyrehose.connection.BackboneConnection` (the client's protocol state, as in
    :class:`fyrehose.Client`) plus the accounting of where each sequence came from."""

    def __init__(self, backbone: Address, account: DeliveryAccount, *, give_up_after: float,
                 journal_bytes: int = 64 << 20) -> None:
        self.backbone = backbone
        self.account = account
        self.connection = BackboneConnection(backbone, flags=FLAGS, keepalive_interval=KEEPALIVE_INTERVAL,
                                             tracker_options={"give_up_after": give_up_after})
        self.tracker = self.connection.track()
        self.journal = MemoryJournal(journal_bytes)
        self.stats = self.connection.stats
        self.recovered: set[int] = set()  # sequences a peer re-delivered, until the driver reports them

    @property
    def acked(self) -> bool:
        return self.connection.last_ack is not None

    def deadline(self) -> float:
        """When :meth:`poll` next has something to do."""
        return self.connection.next_deadline()

    def poll(self, now: float) -> tuple[list[bytes], list[Event]]:
        """Timers: datagrams for the backbone (KEEPALIVE, REQUESTs) and the events of holes given up."""
        sends, events = self.connection.poll(now)
        self._account(events)
        return sends, events

    def receive(self, datagram: bytes, source: Address, now: float) -> tuple[list[Event], codec.Forward | None]:
        """One datagram: the events now released in order, and a FORWARD to serve (only from the backbone).

        The driver calls :meth:`forward_done` once it has served (or dropped) the FORWARD.
        """
        incoming = self.connection.receive(datagram, source, now)
        direct = incoming.from_backbone
        self.journal.add_many(incoming.stored)
        arrived = self.account.arrived
        for seq, payload in incoming.stored:
            arrived(seq, payload, direct)
        if not direct:
            self.recovered.update(seq for seq, _ in incoming.stored)
        self._account(incoming.events)
        return incoming.events, (incoming.forwards[0] if incoming.forwards else None)

    def forward_done(self, forward: codec.Forward) -> None:
        self.connection.forward_done(forward)

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
