"""A publishing Locust process's one confirmed publisher on the backbone: packed, tagged PUSHes and their CONFIRMs.

Pure: datagrams and time in, datagrams and finished batches out.  Every
publishing user of the process shares it (and the driver's one socket), so a
process carries hundreds of thousands of messages per second where a
:class:`fyrehose.Client` per user, with its threads, carried thousands.  The
publisher's guarantees are the client's own: it drives a
:class:`~fyrehose.protocol.connection.BackboneConnection` whose
:class:`~fyrehose.protocol.publishing.PendingPublishes` tags every message, sends the
unconfirmed ones again with the same tags until the timeout, and counts only
the backbone's CONFIRMs (docs/protocol.md).
"""
from __future__ import annotations

from fyrehose.protocol import codec
from fyrehose.protocol.codec import Address
from fyrehose.protocol.connection import BackboneConnection, ConnectionOptions
from fyrehose.protocol.publishing import Finished
from fyrehose.subjects.client_core import ClientCore

FLAGS = codec.FLAG_NOSUBSCRIBE | codec.FLAG_NOJOURNAL | codec.FLAG_BATCH  # CONFIRMs come packed


class ConfirmedPublisher:
    def __init__(self, backbone: Address, *, retry: float = 0.2, timeout: float = 2.0) -> None:
        self.timeout = timeout
        self.connection = BackboneConnection(backbone, ConnectionOptions(flags=FLAGS, confirm_retry=retry))
        self.core = ClientCore(self.connection)
        self.publishes = self.connection.publishes
        self.stats = self.connection.stats

    @property
    def acked(self) -> bool:
        return self.connection.last_ack is not None

    @property
    def pending(self) -> int:
        return len(self.publishes)

    def publish(self, payloads: list[bytes], now: float) -> tuple[int, list[bytes]]:
        """A new batch: its number, and the datagrams that carry it (packed as full as they go)."""
        return self.publishes.start(payloads, now, self.timeout)

    def receive(self, datagram: bytes, source: Address, now: float) -> list[Finished]:
        """One datagram: the batches whose last CONFIRM it carried."""
        return self.connection.receive(datagram, source, now).published

    def handle_timers(self, now: float) -> tuple[list[bytes], list[Finished]]:
        """Timers: KEEPALIVEs and the datagrams sent again; the batches given up."""
        due = self.core.handle_timers(now)
        return due.datagrams, due.finished

    def next_deadline(self) -> float:
        """When :meth:`handle_timers` next has something to do."""
        return self.core.next_deadline()
