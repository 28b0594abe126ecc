"""The gevent TCP server every gateway runs: one reader greenlet per client, bounded output.

A gateway serves many TCP clients from one ordered backbone stream, so one
client that stops reading must not hold up the others or make the gateway's
memory grow.  Output therefore goes through :meth:`Connection.send`, which
only queues (it never blocks the fan-out) up to ``max_pending`` bytes; a
client that falls further behind is disconnected as a slow consumer, with
the protocol's own last words when they can still be delivered intact, and
the reason logged, as nats-server does.  Input is read by one greenlet per
client, which hands the bytes to the protocol session; a session may block
(waiting for the backbone to confirm a publish), which simply stops reading
from that client (TCP back-pressure).
"""
from __future__ import annotations

import logging
import socket
import ssl
from collections import Counter
from collections.abc import Callable
from typing import Protocol

import gevent
from gevent.event import Event
from gevent.pool import Pool
from gevent.server import StreamServer

from fyrehose.addresses import Address

log = logging.getLogger("fyrehose.gateway")

READ_SIZE = 256 << 10  # larger reads make larger batches of confirmed publishes
CLOSE_GRACE = 5.0  # seconds a closing connection gets to flush its output
TLS_HANDSHAKE_TIMEOUT = 10.0  # seconds a client gets to complete the TLS handshake


class Session(Protocol):
    """What a gateway keeps per client: the protocol state and its subscriptions."""

    def receive(self, data: bytes) -> None:
        """Handle bytes from the client (may block: it stops reading from this client only)."""

    def farewell(self, reason: str) -> bytes:
        """The protocol's error message for ``reason``, sent before the gateway hangs up."""

    def closed(self) -> None:
        """The client is gone: drop its subscriptions."""


class Connection:
    """One client's socket with a bounded output queue, written by its own greenlet."""

    def __init__(self, sock: socket.socket, peer: Address, max_pending: int, stats: Counter) -> None:
        self.sock = sock
        self.peer = f"{peer[0]}:{peer[1]}"
        self.max_pending = max_pending
        self.stats = stats
        self.session: Session | None = None
        self.pending = 0  # bytes queued or being written
        self.closing: str | None = None  # why the connection is ending, once it is
        self._chunks: list[bytes] = []
        self._farewell = b""
        self._sending = False
        self._wake = Event()
        self._writer = gevent.spawn(self._write_loop)
        self._grace: gevent.Greenlet | None = None

    def send(self, data: bytes) -> None:
        """Queue ``data`` (never blocks); a client too far behind is disconnected instead."""
        if self.closing is not None:
            return
        if self.pending + len(data) > self.max_pending:
            self.slow_consumer(f"more than {self.max_pending} bytes unread")
            return
        self._chunks.append(data)
        self.pending += len(data)
        self._wake.set()

    def close(self, reason: str = "closed", farewell: bytes = b"") -> None:
        """Hang up after what is queued (and ``farewell``) has been written, or after a grace period."""
        if self.closing is not None:
            return
        self.closing = reason
        self._farewell = farewell
        self._wake.set()
        self._grace = gevent.spawn_later(CLOSE_GRACE, self._hang_up)

    def wait_closed(self) -> None:
        """Block until the output is written (or given up) and the socket closed."""
        self._writer.join()
        if not self.sock.closed:
            self._release()

    def slow_consumer(self, detail: str) -> None:
        """Disconnect a client that does not keep up, telling it why if that can still be done intact."""
        if self.closing is not None:
            return
        reason = f"slow consumer: {detail}"
        self.stats["slow consumers"] += 1
        log.warning("%s disconnected: %s", self.peer, reason)
        self.closing = reason
        dropped = sum(len(chunk) for chunk in self._chunks)
        self._chunks = []
        self.pending -= dropped
        if self._sending:  # a frame is half written: nothing more can be added intact
            self._hang_up()
            return
        self._farewell = self.session.farewell(reason) if self.session else b""
        self._wake.set()
        self._grace = gevent.spawn_later(CLOSE_GRACE, self._hang_up)

    def _write_loop(self) -> None:
        sock = self.sock
        try:
            while True:
                self._wake.wait()
                self._wake.clear()
                while self._chunks:
                    data = b"".join(self._chunks) if len(self._chunks) > 1 else self._chunks[0]
                    self._chunks = []
                    self._sending = True
                    sock.sendall(data)
                    self._sending = False
                    self.pending -= len(data)
                if self.closing is not None:
                    if self._farewell:
                        sock.sendall(self._farewell)
                    break
        except OSError:
            self.closing = self.closing or "connection lost"
        self._sending = False
        self._release()

    def _hang_up(self) -> None:
        if not self._writer.dead:
            self._writer.kill(block=False)
        self._release()

    def _release(self) -> None:
        self.closing = self.closing or "closed"
        self._chunks = []
        if self._grace is not None and self._grace is not gevent.getcurrent():
            self._grace.kill(block=False)
        try:
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes the reader with end-of-file
        except OSError:
            pass
        self.sock.close()


SessionFactory = Callable[[Connection], Session]


class GatewayServer:
    """Accepts clients on ``listen`` and runs one session per client."""

    def __init__(self, listen: Address | socket.socket, make_session: SessionFactory, *, max_pending: int,
                 max_clients: int, stats: Counter, ssl_context: ssl.SSLContext | None = None) -> None:
        self.make_session = make_session
        self.max_pending = max_pending
        self.stats = stats
        self.ssl_context = ssl_context
        self.server = StreamServer(listen, self._handle, spawn=Pool(max_clients))

    @property
    def address(self) -> Address:
        host, port = self.server.address[:2]
        return host, self.server.server_port or port

    def start(self) -> None:
        self.server.start()

    def stop(self) -> None:
        self.server.stop(timeout=1)

    def _handle(self, sock: socket.socket, peer: Address) -> None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.ssl_context is not None:
            try:
                sock.settimeout(TLS_HANDSHAKE_TIMEOUT)
                sock = self.ssl_context.wrap_socket(sock, server_side=True)
                sock.settimeout(None)
            except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
                self.stats["tls handshake failures"] += 1
                log.info("%s:%s: TLS handshake failed: %s", peer[0], peer[1], exc)
                return
        connection = Connection(sock, peer, self.max_pending, self.stats)
        self.stats["connections"] += 1
        session = None
        try:
            session = connection.session = self.make_session(connection)
            while connection.closing is None:
                try:
                    data = sock.recv(READ_SIZE)
                except OSError:
                    break
                if not data:
                    break
                session.receive(data)
        except Exception:  # a bug must cost one connection, never the gateway
            self.stats["session failures"] += 1
            log.exception("%s: session failed; disconnecting", connection.peer)
        finally:
            if session is not None:
                session.closed()
            connection.close()
            connection.wait_closed()  # the server closes the socket once this returns
