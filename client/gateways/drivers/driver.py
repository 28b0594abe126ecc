"""The driver of one pure gateway connection: its client's socket on one side, the backbone on the other.

The Redis, NATS, Marlin and HTTP connections are pure state machines
(bytes and time in; an :class:`~fyrehose.gateways.outbox.Outbox` and
:mod:`requests <fyrehose.gateways.requests>` out).  :class:`ConnectionDriver`
is what the TCP server (:mod:`fyrehose.gateways.drivers.tcp`) holds per client: it
feeds the connection what the client sent, carries out its requests through
the gateway's router (publishes join the loop iteration's one batch;
snapshots ask the cache), feeds the results back, writes what the outbox has
ready, pauses the reading while the connection cannot go on, and hangs up
when the outbox says so.  Messages from the stream reach the connection
through the routes, never through here; the outbox then tells this driver,
which writes them once per loop iteration.
"""
from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Protocol, cast

import gevent

from fyrehose.gateways.access.users import User
from fyrehose.gateways.drivers.router import GatewayRouter
from fyrehose.gateways.drivers.tcp import TcpClient
from fyrehose.gateways.outbox import Outbox
from fyrehose.gateways.requests import Publish, Snapshot, Verify
from fyrehose.subjects.envelope import Envelope

log = logging.getLogger("fyrehose.gateway")


class Requests(Protocol):
    """A connection's requests for its driver to take, in order: Publish, Snapshot, Verify, or its protocol's own."""

    def __len__(self) -> int: ...

    def __iter__(self) -> Iterator[object]: ...

    def clear(self) -> None: ...


class PureConnection(Protocol):
    """What every pure gateway connection offers its driver."""

    outbox: Outbox
    headroom: int  # output kept free below --max-pending for the farewell

    @property
    def requests(self) -> Requests:
        """What the driver must carry out (it takes them all, then clears the list)."""

    @property
    def paused(self) -> bool:
        """Read nothing more for now."""

    @property
    def busy(self) -> bool:
        """Results are still awaited."""

    def receive(self, data: bytes, now: float) -> None: ...

    def published(self, token: int, seqs: list[int]) -> None: ...

    def failed(self, token: int, reason: str) -> None: ...

    def farewell(self, reason: str) -> bytes: ...

    def closed(self) -> None: ...

    def next_deadline(self) -> float | None: ...

    def handle_timers(self, now: float) -> None: ...

    def held(self) -> int: ...


class AsksTheCache(PureConnection, Protocol):
    """A connection that hands out :class:`Snapshot` requests takes their answers."""

    def answered(self, token: int, answer: Envelope | None) -> None: ...


class LogsIn(PureConnection, Protocol):
    """A connection that hands out :class:`Verify` requests takes their results."""

    def verified(self, token: int, user: User | None) -> None: ...


class ConnectionDriver:
    """A :class:`~fyrehose.gateways.drivers.tcp.ClientDriver` for a pure connection, on the gateway's loop."""

    def __init__(self, client: TcpClient, connection: PureConnection, router: GatewayRouter, stats: Counter) -> None:
        self.client = client
        self.connection = connection
        self.router = router
        self.stats = stats
        outbox = connection.outbox
        outbox.became_ready = router.ready  # the stream's messages: written by the router once it routed them
        outbox.owner = self
        client.keep_open = lambda: connection.busy
        self._pump()

    # ------------------------------------------------------------ what the TCP server calls

    def receive(self, data: bytes) -> None:
        outbox = self.connection.outbox
        outbox.held = True
        try:
            self.connection.receive(data, self.client.last_input)
        finally:
            outbox.held = False
        self._pump()

    def farewell(self, reason: str) -> bytes:
        return self.connection.farewell(reason)

    def closed(self) -> None:
        outbox = self.connection.outbox
        outbox.became_ready = outbox.owner = None  # no cycle back to this driver: the client's memory returns at once
        self.connection.closed()

    def next_deadline(self) -> float | None:
        return self.connection.next_deadline()

    def handle_timers(self, now: float) -> None:
        outbox = self.connection.outbox
        outbox.held = True
        try:
            self.connection.handle_timers(now)
        finally:
            outbox.held = False
        self._pump()

    def held(self) -> int:
        return self.connection.held()

    # ------------------------------------------------------------ the connection's output and requests

    def write_ready(self) -> None:
        """The outbox turned ready outside this driver (messages of the stream): the router writes it now."""
        self._guarded(self._pump)

    def _pump(self) -> None:
        """Write what is ready, carry out the requests, follow the connection's pause and close."""
        connection, client = self.connection, self.client
        outbox = connection.outbox
        was_held, outbox.held = outbox.held, True  # what the requests' results write is taken by this loop
        try:
            while True:
                data = outbox.take()
                if data:
                    self._write(data)
                if not connection.requests:
                    break
                requests = list(connection.requests)
                connection.requests.clear()
                for request in requests:
                    self.carry_out(request)
        finally:
            outbox.held = was_held
        if client.closing is not None:
            return
        if connection.outbox.closing is not None:
            reason = connection.outbox.closing
            if reason.startswith("slow consumer"):
                log.warning("%s disconnected: %s", client.peer, reason)
            client.close(reason)
        elif client.input_over and not connection.busy:
            client.close("client closed")
        elif connection.paused:
            client.pause()
        else:
            client.resume()

    def _write(self, data: bytes) -> None:
        client, headroom = self.client, self.connection.headroom
        if headroom and client.closing is None and client.pending + len(data) > client.max_pending - headroom:
            reason = f"slow consumer: more than {client.max_pending - headroom} bytes unread"
            self.stats["slow consumers"] += 1
            log.warning("%s disconnected: %s", client.peer, reason)
            client.send(self.connection.farewell(reason))  # behind what the client has not read: it fits the headroom
            client.close(reason)
            return
        client.send(data)

    def carry_out(self, request: object) -> None:
        """Publish, or ask the cache; a protocol's own requests are its driver's (a subclass)."""
        if request.__class__ is Publish:
            token = request.token
            try:
                self.router.publish_with(request.payloads,
                                         lambda seqs, error: self._published(token, seqs, error))
            except Exception as exc:  # unreachable, closed, too large: the connection hears it at once
                self.connection.failed(token, str(exc))
        elif request.__class__ is Snapshot:
            token = request.token
            self.router.snapshot_with(request.subject, request.timeout,
                                      lambda answer: self._answered(token, answer))
        elif request.__class__ is Verify:
            self._verify(request)
        else:
            raise TypeError(f"no driver for {request!r}")

    def _verify(self, request: Verify) -> None:
        """The slow hash on gevent's thread pool (hashlib.scrypt lets go of the GIL): the loop serves on meanwhile."""
        token, users, credential = request.token, request.users, request.credential

        def check() -> None:
            user = gevent.get_hub().threadpool.apply(users.verify, (credential,))
            self._verified(token, user)

        gevent.spawn(check)

    def _verified(self, token: int, user: User | None) -> None:
        connection = cast(LogsIn, self.connection)  # it handed out the Verify request
        self._feed_back(lambda: connection.verified(token, user))

    def _published(self, token: int, seqs: list[int] | None, error: Exception | None) -> None:
        connection = self.connection
        if error is None:
            self._feed_back(lambda: connection.published(token, seqs or []))
        else:
            self._feed_back(lambda: connection.failed(token, str(error)))

    def _answered(self, token: int, answer: Envelope | None) -> None:
        connection = cast(AsksTheCache, self.connection)  # it handed out the Snapshot request
        self._feed_back(lambda: connection.answered(token, answer))

    def _feed_back(self, result: Callable[[], None]) -> None:
        """Give the connection a request's result (unless the client is gone), then write and re-arm."""
        if self.client.connection is None:
            return

        def step() -> None:
            result()
            self._pump()
            self.client.rearm()

        self._guarded(step)

    def _guarded(self, step) -> None:
        """A bug in one connection costs that client, never the gateway."""
        outbox = self.connection.outbox
        outbox.held = True
        try:
            step()
        except Exception:
            self.stats["connection failures"] += 1
            log.exception("%s: connection failed; disconnecting", self.client.peer)
            self.client.close("connection failed")
        finally:
            outbox.held = False
