"""The gevent TCP server every gateway runs: one reader greenlet per client, bounded output.

A gateway serves many TCP clients from one ordered backbone stream, so one
client that stops reading must not hold up the others or make the gateway's
memory grow.  Output therefore goes through :meth:`TcpClient.send`, which
only queues (it never blocks the fan-out) up to ``max_pending`` bytes; a
client that falls further behind is disconnected as a slow consumer, with
the protocol's own last words when they can still be delivered intact, and
the reason logged, as nats-server does.  Input is read by one greenlet per
client, which hands the bytes to the client's protocol connection; a
connection may block (waiting for the backbone to confirm a publish), which
simply stops reading from that client (TCP back-pressure).

No single client can take the gateway from the others:

- *Fairness*: a reader handles at most :data:`TURN_BYTES` of input, then
  yields to every other greenlet (other clients, the backbone connection's
  timers, the fan-out) before reading again, so a client that streams
  cheap commands as fast as it can gets one turn among many instead of the
  whole loop.
- *Memory*: besides each client's ``max_pending``, all clients' queued
  output shares one budget (``max_output``); when it is spent, the client
  with the most unread output is disconnected as a slow consumer.  All
  clients' unfinished input (incomplete commands, each bounded by its
  protocol's limits) shares another (``max_input``): a client whose input
  would not fit is closed with the protocol's error.  Nothing
  on a client's path refers back to it once it is closed, so its memory
  returns at once, without waiting for the cycle collector.
- *Admission*: at ``max_clients`` a new connection is accepted, told the
  protocol's own refusal (``refusal``) and closed, instead of waiting in the
  listen backlog where it would hang.
- *Deadlines*: a connection may ask to be woken without input
  (:meth:`ClientConnection.wake_at`), for handshake deadlines, idle timeouts and
  keepalive PINGs; the reader waits for input only until then.
"""
from __future__ import annotations

import logging
import socket
import ssl
import time
from collections import Counter
from collections.abc import Callable
from typing import Protocol

import gevent
from gevent.event import Event
from gevent.server import StreamServer

from fyrehose.gateways.budget import InputBudget
from fyrehose.protocol.codec import Address

log = logging.getLogger("fyrehose.gateway")

TURN_BYTES = 8 << 10  # input one client's connection handles before the other greenlets get their turn
CLOSE_GRACE = 5.0  # seconds a closing client gets to flush its output
TLS_HANDSHAKE_TIMEOUT = 10.0  # seconds a client gets to complete the TLS handshake
REFUSAL_TIMEOUT = 1.0  # seconds a refused connection's last words may take to be written


class ClientConnection(Protocol):
    """What a gateway keeps per client: the protocol state and its subscriptions."""

    def receive(self, data: bytes) -> None:
        """Handle bytes from the client (may block: it stops reading from this client only)."""

    def farewell(self, reason: str) -> bytes:
        """The protocol's error message for ``reason``, sent before the gateway hangs up."""

    def closed(self) -> None:
        """The client is gone: drop its subscriptions."""

    def wake_at(self) -> float | None:
        """When (``time.monotonic()``) to call :meth:`wake` if no input arrives before; None: never."""

    def wake(self, now: float) -> None:
        """No input arrived by :meth:`wake_at`: time to PING, or to close an idle or silent client."""

    def held(self) -> int:
        """Bytes of input received and not yet handled (an incomplete command or frame)."""


class OutputBudget:
    """The bytes all clients may have queued together; over it, the one furthest behind goes."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self.clients: dict[TcpClient, None] = {}

    def claim(self, size: int) -> None:
        self.used += size
        while self.used > self.limit and self.clients:
            furthest = max(self.clients, key=lambda client: client.pending)
            if not furthest.pending:
                break
            furthest.slow_consumer(f"the gateway's output budget of {self.limit} bytes is spent")


class TcpClient:
    """One client's socket with a bounded output queue, written by its own greenlet."""

    def __init__(self, sock: socket.socket, peer: Address, max_pending: int, stats: Counter,
                 budget: OutputBudget | None = None) -> None:
        self.sock = sock
        self.peer = f"{peer[0]}:{peer[1]}"
        self.max_pending = max_pending
        self.stats = stats
        self.connection: ClientConnection | None = None  # the protocol's state, set by GatewayServer
        self.budget = budget if budget is not None else OutputBudget(1 << 62)
        self.budget.clients[self] = None
        self.last_input = time.monotonic()  # when the client last sent anything
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
        self.budget.claim(len(data))

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
        # gevent has no stubs: its sockets (StreamServer's, gevent.ssl's) are annotated as the socket.socket
        # they stand in for, which has no ``closed``
        if not self.sock.closed:  # type: ignore[attr-defined]
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
        self._written(dropped)
        if self._sending:  # a frame is half written: nothing more can be added intact
            self._hang_up()
            return
        self._farewell = self.connection.farewell(reason) if self.connection else b""
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
                    self._written(len(data))
                if self.closing is not None:
                    if self._farewell:
                        sock.sendall(self._farewell)
                    break
        except OSError:
            self.closing = self.closing or "connection lost"
        self._sending = False
        self._release()

    def _written(self, size: int) -> None:
        """``size`` bytes of output left the queue (written or dropped)."""
        self.pending -= size
        self.budget.used -= size

    def _hang_up(self) -> None:
        if not self._writer.dead:
            self._writer.kill(block=False)
        self._release()

    def _release(self) -> None:
        self.closing = self.closing or "closed"
        self._written(self.pending)  # whatever was still queued or half written is given up
        self._chunks = []
        self.budget.clients.pop(self, None)
        if self._grace is not None and self._grace is not gevent.getcurrent():
            self._grace.kill(block=False)
        try:
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes the reader with end-of-file
        except OSError:
            pass
        self.sock.close()


ConnectionFactory = Callable[[TcpClient], ClientConnection]


class GatewayServer:
    """Accepts clients on ``listen`` and runs one connection per client, at most ``max_clients`` at once."""

    def __init__(self, listen: Address | socket.socket, make_connection: ConnectionFactory, *, max_pending: int,
                 max_clients: int, stats: Counter, ssl_context: ssl.SSLContext | None = None,
                 max_output: int = 1 << 62, max_input: int = 1 << 62, refusal: bytes = b"") -> None:
        self.make_connection = make_connection
        self.max_pending = max_pending
        self.max_clients = max_clients
        self.refusal = refusal
        self.stats = stats
        self.ssl_context = ssl_context
        self.budget = OutputBudget(max_output)
        self.input_budget = InputBudget(max_input)
        self.clients = 0
        self._refusals_logged = 0.0  # when a refusal was last logged (a connection flood logs once a second)
        self.server = StreamServer(listen, self._handle)

    @property
    def address(self) -> Address:
        host, port = self.server.address[:2]
        return host, self.server.server_port or port

    def start(self) -> None:
        self.server.start()

    def stop(self) -> None:
        self.server.stop(timeout=1)

    def _handle(self, sock: socket.socket, peer: Address) -> None:
        if self.clients >= self.max_clients:
            self._refuse(sock, peer)
            return
        self.clients += 1
        try:
            self._serve(sock, peer)
        finally:
            self.clients -= 1

    def _refuse(self, sock: socket.socket, peer: Address) -> None:
        """The protocol's "too many clients", then hang up (as redis-server and nats-server do)."""
        self.stats["refused connections"] += 1
        now = time.monotonic()
        if now - self._refusals_logged >= 1.0:
            self._refusals_logged = now
            log.warning("%s:%s refused: %d clients connected (--max-clients); %d refused so far",
                        peer[0], peer[1], self.clients, self.stats["refused connections"])
        try:
            sock.settimeout(REFUSAL_TIMEOUT)
            if self.refusal:
                sock.sendall(self.refusal)
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    def _serve(self, sock: socket.socket, peer: Address) -> None:
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
        client = TcpClient(sock, peer, self.max_pending, self.stats, self.budget)
        self.stats["connections"] += 1
        connection = None
        claimed = 0  # bytes of self.input_budget this client's unfinished input holds
        try:
            connection = client.connection = self.make_connection(client)
            while client.closing is None:
                wake_at = connection.wake_at()
                timer = None if wake_at is None else gevent.Timeout(max(0.0, wake_at - time.monotonic()))
                try:
                    if timer is not None:
                        timer.start()
                    data = sock.recv(TURN_BYTES)
                except gevent.Timeout as expired:
                    if expired is not timer:
                        raise
                    connection.wake(time.monotonic())
                    continue
                except OSError:
                    break
                finally:
                    if timer is not None:
                        timer.close()
                if not data:
                    break
                client.last_input = time.monotonic()
                connection.receive(data)
                held = connection.held()
                if not self.input_budget.resize(claimed, held):
                    self.stats["input budget refusals"] += 1
                    reason = f"the gateway's input budget of {self.input_budget.limit} bytes is spent"
                    log.warning("%s disconnected: %s", client.peer, reason)
                    client.close(reason, connection.farewell(reason))
                    break
                claimed = held
                gevent.sleep(0)  # every other client, and the backbone connection, get their turn
        except Exception:  # a bug must cost one client, never the gateway
            self.stats["connection failures"] += 1
            log.exception("%s: connection failed; disconnecting", client.peer)
        finally:
            self.input_budget.resize(claimed, 0)
            if connection is not None:
                connection.closed()
            client.close()
            client.wait_closed()  # the server closes the socket once this returns
            client.connection = None  # no cycle between the client and its connection: memory returns now
