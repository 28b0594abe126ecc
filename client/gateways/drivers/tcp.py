"""The gevent TCP server every gateway runs: every client driven from the loop itself, output bounded.

A gateway serves many TCP clients from one ordered backbone stream.  No
greenlet waits for a client: each client's socket is non-blocking and
watched by the loop, and one *turn* (a callback of the loop, run once per
iteration) reads every client that has input, hands each read to the
client's driver (:class:`ClientDriver`: a pure connection's, which never waits), and
writes nothing itself.  The publishes those connections ask for in the turn
go to the backbone together (:class:`~fyrehose.drivers.link.BackboneLink`
packs every publish of a loop iteration into one batch), and their replies
are written when the CONFIRMs come back, together, after the datagram that
carried them.  A client's output is queued by :meth:`TcpClient.send`, which
never blocks the fan-out, and written by one callback per loop iteration for
every client that has some (a send that the kernel does not take whole
waits for the socket to be writable).

No single client can take the gateway from the others:

- *Fairness*: a turn reads at most :data:`TURN_BYTES` of each client's
  input, then the other clients, the backbone connection's greenlet and the
  fan-out get theirs before the next turn; a client that streams cheap
  commands as fast as it can gets one read among many instead of the whole
  loop.  Its connection does not wait for the backbone meanwhile, so a fast
  client pays an iteration of the loop per read, not a CONFIRM round trip.
- *Back-pressure*: a connection that has to wait before going on (a reply
  that must follow a confirmation, too many unconfirmed publishes) asks for
  no more input (:meth:`TcpClient.pause`); its socket is not read until it
  can go on, so TCP slows the client down.
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
  (:meth:`ClientDriver.next_deadline`), for handshake deadlines, idle timeouts and
  keepalive PINGs; one timer per client, re-armed only when it comes due or
  the deadline moves earlier.
"""
from __future__ import annotations

import logging
import socket
import ssl
import time
from collections import Counter
from collections.abc import Callable
from typing import Any, Protocol

import gevent
from gevent.event import Event
from gevent.server import StreamServer

from fyrehose.gateways.access.guard import AddressCounts
from fyrehose.gateways.budget import InputBudget
from fyrehose.protocol.codec import Address

log = logging.getLogger("fyrehose.gateway")

TURN_BYTES = 8 << 10  # input of one client read per turn before the other clients get theirs
CLOSE_GRACE = 5.0  # seconds a closing client gets to flush its output
TLS_HANDSHAKE_TIMEOUT = 10.0  # seconds a client gets to complete the TLS handshake
REFUSAL_TIMEOUT = 1.0  # seconds a refused connection's last words may take to be written
_WOULD_BLOCK = (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError)


def certificate_name(sock: socket.socket) -> str | None:
    """The subject common name of the client certificate a TLS socket verified, or None (no TLS, no certificate)."""
    getpeercert = getattr(sock, "getpeercert", None)
    certificate = getpeercert() if getpeercert is not None else None
    if not certificate:
        return None
    for entry in certificate.get("subject", ()):
        for key, value in entry:
            if key == "commonName":
                return str(value)
    return None


class ClientDriver(Protocol):
    """What a gateway keeps per client: the driver of its pure connection (the protocol state, its subscriptions)."""

    def receive(self, data: bytes) -> None:
        """Handle bytes from the client (never waits: what must wait pauses the reading instead)."""

    def farewell(self, reason: str) -> bytes:
        """The protocol's error message for ``reason``, sent before the gateway hangs up."""

    def closed(self) -> None:
        """The client is gone: drop its subscriptions."""

    def next_deadline(self) -> float | None:
        """When (``time.monotonic()``) to call :meth:`handle_timers` if no input arrives before; None: never."""

    def handle_timers(self, now: float) -> None:
        """No input arrived by :meth:`next_deadline`: time to PING, or to close an idle or silent client."""

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
    """One client's non-blocking socket with a bounded output queue, written from the loop."""

    def __init__(self, sock: socket.socket, peer: Address, max_pending: int, stats: Counter,
                 budget: OutputBudget | None = None, server: GatewayServer | None = None) -> None:
        self.sock = sock
        self.peer = f"{peer[0]}:{peer[1]}"
        self.max_pending = max_pending
        self.stats = stats
        self.server = server
        self.connection: ClientDriver | None = None  # the driver of the protocol's state, set by GatewayServer
        self.budget = budget if budget is not None else OutputBudget(1 << 62)
        self.budget.clients[self] = None
        self.last_input = time.monotonic()  # when the client last sent anything
        self.pending = 0  # bytes queued or being written
        self.closing: str | None = None  # why the connection is ending, once it is
        self.input_over = False  # the client closed its side; replies still owed are written first
        self.keep_open: Callable[[], bool] | None = None  # whether replies are still owed (by the connection's driver)
        self.done = Event()  # set once the socket is released
        self.paused = False
        self.claimed = 0  # bytes of the server's input budget this client's unfinished input holds
        self.timer_due: float | None = None  # when the timer for the connection's next deadline fires
        self.certificate_name: str | None = None  # the common name of a verified client certificate (TLS)
        self.in_turn = False  # queued for the next turn's reads
        self._chunks: list[bytes] = []
        self._unsent: memoryview | None = None  # the rest of a write the kernel did not take whole
        self._writing = 0  # bytes of that write
        self._farewell = b""
        self._flush_queued = False
        self._grace: gevent.Greenlet | None = None
        self._tls_pending: Callable[[], int] | None = getattr(sock, "pending", None)  # an SSL socket's
        loop = gevent.get_hub().loop
        sock.settimeout(0.0)
        fileno = sock.fileno()
        self._read_watcher: Any = loop.io(fileno, 1)
        self._write_watcher: Any = loop.io(fileno, 2)
        self._timer: Any = None

    def send(self, data: bytes) -> None:
        """Queue ``data`` (never blocks); a client too far behind is disconnected instead."""
        if self.closing is not None or not data:
            return
        if self.pending + len(data) > self.max_pending:
            self.slow_consumer(f"more than {self.max_pending} bytes unread")
            return
        self._chunks.append(data)
        self.pending += len(data)
        self._queue_flush()
        self.budget.claim(len(data))

    def close(self, reason: str = "closed", farewell: bytes = b"") -> None:
        """Hang up after what is queued (and ``farewell``) has been written, or after a grace period."""
        if self.closing is not None:
            return
        self.closing = reason
        self._farewell = farewell
        self.stop_reading()
        self._grace = gevent.spawn_later(CLOSE_GRACE, self.release)
        self._queue_flush()

    def slow_consumer(self, detail: str) -> None:
        """Disconnect a client that does not keep up, telling it why if that can still be done intact."""
        if self.closing is not None:
            return
        reason = f"slow consumer: {detail}"
        self.stats["slow consumers"] += 1
        log.warning("%s disconnected: %s", self.peer, reason)
        dropped = sum(len(chunk) for chunk in self._chunks)
        self._chunks = []
        self._written(dropped)
        if self._unsent is not None:  # a frame is half written: nothing more can be added intact
            self.closing = reason
            self.release()
            return
        self.close(reason, self.connection.farewell(reason) if self.connection else b"")

    def pause(self) -> None:
        """Read no more input until :meth:`resume`.

        The read watcher stays on until input actually arrives meanwhile (the server's turn stops it then):
        a pause that ends before the client sends more, a request waiting for its CONFIRM, costs no
        ``epoll_ctl`` to stop and restart it."""
        self.paused = True

    def resume(self) -> None:
        if self.paused:
            self.paused = False
            if self.closing is None and not self.input_over and self.server is not None:
                if not self._read_watcher.active:
                    self._read_watcher.start(self.server.readable, self)
                if self.tls_pending():
                    self.server.readable(self)

    def rearm(self) -> None:
        """The connection's deadline may have moved (a response went out): have it woken then."""
        if self.server is not None:
            self.server.arm(self)

    def start_tls(self, context: ssl.SSLContext) -> None:
        """Write what is queued in the clear (the protocol's greeting: NATS's INFO), then turn the socket to TLS.

        Called before reading starts; waits (cooperatively, this client's greenlet only) for the write and the
        handshake, at most :data:`TLS_HANDSHAKE_TIMEOUT` each.  OSError or ValueError when either fails.
        """
        greeting = b"".join(self._chunks)
        self._chunks = []
        sock = self.sock
        sock.settimeout(TLS_HANDSHAKE_TIMEOUT)
        try:
            sock.sendall(greeting)
        finally:
            self._written(len(greeting))
        tls = context.wrap_socket(sock, server_side=True)  # the same file descriptor: the watchers still apply
        tls.settimeout(0.0)
        self.sock = tls
        self._tls_pending = tls.pending
        self.certificate_name = certificate_name(tls)

    def tls_pending(self) -> bool:
        """Whether TLS holds decrypted input the kernel no longer reports."""
        return self._tls_pending is not None and self._tls_pending() > 0

    def start(self) -> None:
        """Start reading (the connection is in place)."""
        if self.server is not None and self.closing is None and not self.paused:
            self._read_watcher.start(self.server.readable, self)

    def stop_reading(self) -> None:
        """Leave the input in the kernel (closing, or paused and more arrived): resume starts reading again."""
        self._read_watcher.stop()

    def _queue_flush(self) -> None:
        if not self._flush_queued and self.server is not None:
            self._flush_queued = True
            self.server.queue_flush(self)

    def flush(self) -> None:
        """Hand the kernel what it takes of the queued output; the rest when the socket is writable."""
        self._flush_queued = False
        if self._write_watcher.active or self.done.is_set():
            return
        self._write()

    def _write(self) -> None:
        sock = self.sock
        try:
            while True:
                if self._unsent is None:
                    if self._chunks:
                        chunks, self._chunks = self._chunks, []
                        data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
                    elif self.closing is not None and self._farewell:
                        data, self._farewell = self._farewell, b""
                        self.pending += len(data)  # counted like the rest until written
                        self.budget.used += len(data)
                    else:
                        break
                    self._unsent = memoryview(data)
                    self._writing = len(data)
                unsent = self._unsent
                sent = sock.send(unsent)
                if sent < len(unsent):
                    self._unsent = unsent[sent:]
                    if not self._write_watcher.active:
                        self._write_watcher.start(self._writable)
                    return
                self._unsent = None
                self._written(self._writing)  # a write counts as pending until the kernel took all of it
                self._writing = 0
        except _WOULD_BLOCK:
            if not self._write_watcher.active:
                self._write_watcher.start(self._writable)
            return
        except OSError:
            self.closing = self.closing or "connection lost"
            self.release()
            return
        if self._write_watcher.active:
            self._write_watcher.stop()
        if self.closing is not None:
            self.release()

    def _writable(self) -> None:
        self._write_watcher.stop()
        self._write()

    def _written(self, size: int) -> None:
        """``size`` bytes of output left the queue (written or dropped)."""
        self.pending -= size
        self.budget.used -= size

    def release(self) -> None:
        """Hang up now: whatever is still queued is given up."""
        if self.done.is_set():
            return
        self.closing = self.closing or "closed"
        self._written(self.pending)  # whatever was still queued or half written is given up
        self._chunks = []
        self._unsent = None
        self._writing = 0
        self.budget.clients.pop(self, None)
        if self._grace is not None and self._grace is not gevent.getcurrent():
            self._grace.kill(block=False)
        for watcher in (self._read_watcher, self._write_watcher, self._timer):
            if watcher is not None:
                watcher.stop()
                watcher.close()
        self._timer = None
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        self.done.set()

    def arm(self, at: float | None, callback: Callable[[TcpClient], None]) -> None:
        """Have ``callback`` called at ``at`` (monotonic), unless the timer already fires sooner."""
        if at is None:
            if self._timer is not None:
                self._timer.stop()
                self.timer_due = None
            return
        if self.timer_due is not None and self.timer_due <= at and self._timer is not None \
                and self._timer.active:
            return
        if self._timer is not None:
            self._timer.stop()
            self._timer.close()
        self._timer = gevent.get_hub().loop.timer(max(0.0, at - time.monotonic()))
        self.timer_due = at
        self._timer.start(callback, self)


ConnectionFactory = Callable[[TcpClient], ClientDriver]


class GatewayServer:
    """Accepts clients on ``listen`` and runs one connection per client, at most ``max_clients`` at once."""

    def __init__(self, listen: Address | socket.socket, make_connection: ConnectionFactory, *, max_pending: int,
                 max_clients: int, stats: Counter, ssl_context: ssl.SSLContext | None = None,
                 max_output: int = 1 << 62, max_input: int = 1 << 62, refusal: bytes = b"",
                 max_clients_per_address: int | None = None, tls_after_greeting: ssl.SSLContext | None = None) -> None:
        """``ssl_context``: TLS from the first byte; ``tls_after_greeting``: TLS once the connection's first words
        (NATS's INFO) were written in the clear (:meth:`TcpClient.start_tls`)."""
        self.make_connection = make_connection
        self.tls_after_greeting = tls_after_greeting
        self.max_pending = max_pending
        self.max_clients = max_clients
        self.per_address = AddressCounts(max_clients_per_address or max_clients)
        self.refusal = refusal
        self.stats = stats
        self.ssl_context = ssl_context
        self.budget = OutputBudget(max_output)
        self.input_budget = InputBudget(max_input)
        self.clients = 0
        self._refusals_logged = 0.0  # when a refusal was last logged (a connection flood logs once a second)
        self._loop = gevent.get_hub().loop
        self._to_read: list[TcpClient] = []  # clients with input, for the next turn
        self._turn_queued = False
        self._to_flush: list[TcpClient] = []
        self._flush_queued = False
        self.server = StreamServer(listen, self._handle)

    @property
    def address(self) -> Address:
        host, port = self.server.address[:2]
        return host, self.server.server_port or port

    def start(self) -> None:
        self.server.start()

    def stop(self) -> None:
        self.server.stop(timeout=1)

    # ------------------------------------------------------------ admission

    def _handle(self, sock: socket.socket, peer: Address) -> None:
        if self.clients >= self.max_clients:
            self._refuse(sock, peer, "refused connections", f"{self.clients} clients connected (--max-clients)")
            return
        if not self.per_address.admit(peer[0]):
            self._refuse(sock, peer, "refused connections per address",
                         f"{self.per_address[peer[0]]} clients of {peer[0]} connected (--max-clients-per-address)")
            return
        self.clients += 1
        try:
            self._serve(sock, peer)
        finally:
            self.clients -= 1
            self.per_address.release(peer[0])

    def _refuse(self, sock: socket.socket, peer: Address, counter: str, why: str) -> None:
        """The protocol's "too many clients", then hang up (as redis-server and nats-server do)."""
        self.stats[counter] += 1
        now = time.monotonic()
        if now - self._refusals_logged >= 1.0:
            self._refusals_logged = now
            log.warning("%s:%s refused: %s; %d refused so far", peer[0], peer[1], why, self.stats[counter])
        try:
            sock.settimeout(REFUSAL_TIMEOUT)
            if self.refusal:
                sock.sendall(self.refusal)
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    def _serve(self, sock: socket.socket, peer: Address) -> None:
        """The client's greenlet: the TLS handshake, then nothing but waiting for the client to be released."""
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.ssl_context is not None:
            try:
                sock.settimeout(TLS_HANDSHAKE_TIMEOUT)
                sock = self.ssl_context.wrap_socket(sock, server_side=True)
            except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
                self.stats["tls handshake failures"] += 1
                log.info("%s:%s: TLS handshake failed: %s", peer[0], peer[1], exc)
                return
        client = TcpClient(sock, peer, self.max_pending, self.stats, self.budget, self)
        client.certificate_name = certificate_name(sock)
        self.stats["connections"] += 1
        try:
            client.connection = self.make_connection(client)
        except Exception:  # a bug must cost one client, never the gateway
            self._failed(client)
        else:
            if self._secured(client):
                client.start()
                self.arm(client)
        try:
            client.done.wait()  # the loop serves the client; the server closes the socket once this returns
        finally:
            self._forget(client)

    def _secured(self, client: TcpClient) -> bool:
        """TLS after the greeting, when asked for: whether the client may be served (False: it is released)."""
        if self.tls_after_greeting is None:
            return True
        try:
            client.start_tls(self.tls_after_greeting)
        except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
            self.stats["tls handshake failures"] += 1
            log.info("%s: TLS handshake failed: %s", client.peer, exc)
            client.release()
            return False
        return True

    def _forget(self, client: TcpClient) -> None:
        """The client is gone: free what it held, its connection first (no cycle keeps its memory)."""
        if client.closing is None:
            client.close()
        client.release()
        self.input_budget.resize(client.claimed, 0)
        client.claimed = 0
        connection, client.connection = client.connection, None
        if connection is not None:
            try:
                connection.closed()
            except Exception:
                self.stats["connection failures"] += 1
                log.exception("%s: closing the connection failed", client.peer)

    def _failed(self, client: TcpClient) -> None:
        self.stats["connection failures"] += 1
        log.exception("%s: connection failed; disconnecting", client.peer)
        client.close("connection failed")

    # ------------------------------------------------------------ input: one turn per loop iteration

    def readable(self, client: TcpClient) -> None:
        """The client has input (or has closed): read it in the next turn."""
        if not client.in_turn:
            client.in_turn = True
            self._to_read.append(client)
            if not self._turn_queued:
                self._turn_queued = True
                self._loop.run_callback(self._turn)

    def _turn(self) -> None:
        self._turn_queued = False
        clients, self._to_read = self._to_read, []
        for client in clients:
            client.in_turn = False
            if client.paused or client.input_over:
                client.stop_reading()  # input while paused waits in the kernel until resume
            elif client.closing is None:
                self._read(client)

    def _read(self, client: TcpClient) -> None:
        connection = client.connection
        if connection is None:
            return
        try:
            data = client.sock.recv(TURN_BYTES)
        except _WOULD_BLOCK:
            return
        except OSError:
            client.close("connection lost")
            return
        if not data:
            self._input_over(client)
            return
        client.last_input = time.monotonic()
        try:
            connection.receive(data)
            held = connection.held()
        except Exception:
            self._failed(client)
            return
        if not self.input_budget.resize(client.claimed, held):
            self.stats["input budget refusals"] += 1
            reason = f"the gateway's input budget of {self.input_budget.limit} bytes is spent"
            log.warning("%s disconnected: %s", client.peer, reason)
            client.close(reason, connection.farewell(reason))
            return
        client.claimed = held
        if client.closing is None:
            self.arm(client)
            if client.tls_pending():  # TLS holds more input than the kernel reports: read it next turn
                self.readable(client)

    def _input_over(self, client: TcpClient) -> None:
        """The client closed its side: hang up, once the replies it is still owed are written."""
        client.input_over = True
        client.pause()
        if client.keep_open is None or not client.keep_open():
            client.close("client closed")

    # ------------------------------------------------------------ output: one flush per loop iteration

    def queue_flush(self, client: TcpClient) -> None:
        self._to_flush.append(client)
        if not self._flush_queued:
            self._flush_queued = True
            self._loop.run_callback(self._flush)

    def _flush(self) -> None:
        self._flush_queued = False
        clients, self._to_flush = self._to_flush, []
        for client in clients:
            client.flush()

    # ------------------------------------------------------------ deadlines

    def arm(self, client: TcpClient) -> None:
        connection = client.connection
        if connection is not None and client.closing is None:
            client.arm(connection.next_deadline(), self._deadline_reached)

    def _deadline_reached(self, client: TcpClient) -> None:
        client.timer_due = None
        connection = client.connection
        if connection is None or client.closing is not None:
            return
        now = time.monotonic()
        try:
            due = connection.next_deadline()
            if due is not None and now >= due:
                connection.handle_timers(now)
        except Exception:
            self._failed(client)
            return
        self.arm(client)
