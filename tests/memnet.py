"""An in-memory network between the pure backbone and pure client connections, with a manual clock.

No sockets, threads or sleeps: :class:`MemoryNetwork` moves the datagrams
that :meth:`Backbone.flush` and :meth:`BackboneConnection.handle_timers` produce to
their destinations, through rules that may drop, duplicate or reorder them,
and advances time in fixed steps.  Lease, gap-recovery and give-up behaviour
that takes seconds over real UDP runs here in milliseconds, deterministically.
The clients answer FORWARDs from what they stored, as :class:`fyrehose.Client`
does, unpaced.
"""
from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

from fyrehose.backbone.core import Backbone
from fyrehose.protocol import codec
from fyrehose.protocol.codec import Address
from fyrehose.protocol.connection import BackboneConnection, ConnectionOptions
from fyrehose.protocol.tracker import Event, Lost, Message, TrackerOptions

BACKBONE: Address = ("127.0.0.1", 2323)
Rule = Callable[[bytes, Address, Address], bool]  # (datagram, source, destination) -> applies


@dataclass
class MemoryClient:
    address: Address
    connection: BackboneConnection
    store: dict[int, bytes] = field(default_factory=dict)
    events: list[Event] = field(default_factory=list)
    confirms: dict[int, int] = field(default_factory=dict)
    silent: bool = False  # stops sending (a client whose process hangs)

    @property
    def messages(self) -> list[Message]:
        return [e for e in self.events if isinstance(e, Message)]

    @property
    def lost(self) -> list[Lost]:
        return [e for e in self.events if isinstance(e, Lost)]


class MemoryNetwork:
    def __init__(self, *, seed: int = 0, step: float = 0.01) -> None:
        self.now = 1000.0
        self.step = step
        self.rng = random.Random(seed)
        self.backbone = Backbone(rng=random.Random(seed))
        self.clients: dict[Address, MemoryClient] = {}
        self.drop: Rule = lambda *_: False
        self.duplicate: Rule = lambda *_: False
        self.reorder = False  # shuffle each step's datagrams
        self.dropped = 0
        self._in_flight: list[tuple[bytes, Address, Address]] = []
        self._next_tag = 1

    def client(self, port: int, *, subscribe: bool = True, journal: bool = True, batch: bool = True,
               from_seq: int | None = None, redelivering: bool = False, **tracker_options) -> MemoryClient:
        flags = codec.FLAG_HEAD | (codec.FLAG_BATCH if batch else 0) | (codec.FLAG_REDELIVERING if redelivering else 0)
        flags |= 0 if subscribe else codec.FLAG_NOSUBSCRIBE
        flags |= 0 if journal and subscribe else codec.FLAG_NOJOURNAL
        tokens = iter(range(1, 1 << 30))
        options = ConnectionOptions(flags=flags, tracker=TrackerOptions(**tracker_options))
        connection = BackboneConnection(BACKBONE, options,
                                        token_source=lambda size: next(tokens).to_bytes(size, "big"))
        if subscribe:
            connection.track(from_seq)
        address = ("127.0.0.1", port)
        client = self.clients[address] = MemoryClient(address, connection)
        return client

    def publish(self, client: MemoryClient, payloads: list[bytes], tags: list[int] | None = None) -> list[int]:
        """PUSH with CONFIRM tags (new ones, or ``tags`` for a retry), packed; returns the tags.

        Their sequence numbers arrive in ``client.confirms``.
        """
        if tags is None:
            tags = list(range(self._next_tag, self._next_tag + len(payloads)))
            self._next_tag += len(payloads)
        frames = [codec.encode_push(p, t) for p, t in zip(payloads, tags, strict=True)]
        for datagram in codec.pack_greedy(frames):
            self._send(datagram, client.address, BACKBONE)
        return tags

    def run(self, seconds: float) -> None:
        for _ in range(round(seconds / self.step)):
            self.tick()

    def run_until(self, at: float) -> None:
        """Tick every ``step`` up to ``at``, the last tick at exactly ``at`` (an instant, not a duration)."""
        while self.now + self.step < at:
            self.tick()
        self.tick(at=at)

    def tick(self, at: float | None = None) -> None:
        """One step of time: everyone's timers, then every datagram in flight arrives (``at``: an exact instant)."""
        if at is not None and at < self.now:
            raise ValueError(f"time runs forwards: {at} < {self.now}")
        self.now = self.now + self.step if at is None else at
        for client in self.clients.values():
            if client.silent:
                continue
            datagrams, events = client.connection.handle_timers(self.now)
            client.events.extend(events)
            for datagram in datagrams:
                self._send(datagram, client.address, BACKBONE)
        self._carry()
        for data, destination in self.backbone.flush(self.now).sends:
            self._send(bytes(data), BACKBONE, destination)
        self._carry()

    def _send(self, datagram: bytes, source: Address, destination: Address) -> None:
        if self.drop(datagram, source, destination):
            self.dropped += 1
            return
        self._in_flight.append((datagram, source, destination))
        if self.duplicate(datagram, source, destination):
            self._in_flight.append((datagram, source, destination))

    def _carry(self) -> None:
        while self._in_flight:
            batch, self._in_flight = self._in_flight, []
            if self.reorder:
                self.rng.shuffle(batch)
            for datagram, source, destination in batch:
                if destination == BACKBONE:
                    self.backbone.receive(datagram, source, self.now)
                elif destination in self.clients:
                    self._arrive(self.clients[destination], datagram, source)

    def _arrive(self, client: MemoryClient, datagram: bytes, source: Address) -> None:
        incoming = client.connection.receive(datagram, source, self.now)
        client.store.update(incoming.stored)
        client.events.extend(incoming.events)
        client.confirms.update((tag + i, seq + i) for tag, count, seq in incoming.confirms for i in range(count))
        for forward in incoming.forwards:
            target = (forward.addr, forward.port)
            for seq in range(forward.from_seq, forward.to_seq + 1):
                if seq in client.store:
                    self._send(codec.encode_deliver(seq, client.store[seq]), client.address, target)
            client.connection.forward_done(forward)
