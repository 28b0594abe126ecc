"""The listening side: accept TCP connections (gevent), do the TLS handshake, run one LumberjackClient each.

A handshake that fails (no client certificate, wrong CA, not TLS at all) is
one line on stderr and a counted error; the server goes on.

With ``--users`` a writer is the user its client certificate names (the
protocol carries no login), else the users file's anonymous user; one that
is neither is closed before anything it sends is read (Lumberjack has no
error frame), counted as a refused login and logged at most once a second
per address.  ``--max-clients-per-address`` bounds one host's connections.
"""
from __future__ import annotations

import socket
import ssl
import sys
import time
from collections import Counter

import gevent
import gevent.event
from gevent.server import StreamServer

from fyrehose.drivers.link import BackboneLink
from fyrehose.gateways.access.guard import AddressCounts
from fyrehose.gateways.access.login import Access, Login
from fyrehose.gateways.budget import InputBudget
from fyrehose.gateways.drivers.lumberjack.driver import (
    DEFAULT_INACTIVITY_TIMEOUT,
    DEFAULT_MAX_PENDING_BYTES,
    DEFAULT_STALL_TIMEOUT,
    LumberjackClient,
)
from fyrehose.gateways.drivers.tcp import certificate_name
from fyrehose.gateways.lumberjack.events import SubjectRule
from fyrehose.gateways.lumberjack.window import AckWindow
from fyrehose.protocol.codec import Address

HANDSHAKE_TIMEOUT = 10.0


def _log(line: str) -> None:
    print(f"lumberjack {line}", file=sys.stderr, flush=True)


class OnceASecond:
    """Logs at most one line a second: a flood of refused or silent connections must not flood stderr."""

    def __init__(self) -> None:
        self._logged = float("-inf")

    def __call__(self, line: str) -> None:
        now = time.monotonic()
        if now - self._logged >= 1.0:
            self._logged = now
            _log(line)


class LumberjackServer:
    def __init__(self, listen: Address, publisher: BackboneLink, rule: SubjectRule, *,
                 tls: ssl.SSLContext | None = None, max_connections: int = 1024,
                 max_compressed_bytes: int, max_pending_bytes: int = DEFAULT_MAX_PENDING_BYTES,
                 max_buffered_bytes: int = 1 << 62, stall_timeout: float = DEFAULT_STALL_TIMEOUT,
                 inactivity_timeout: float = DEFAULT_INACTIVITY_TIMEOUT, access: Access | None = None,
                 max_connections_per_address: int = 1 << 30) -> None:
        self.publisher = publisher
        self.access = access if access is not None else Access(None)
        self.rule = rule
        self.tls = tls
        self.max_compressed_bytes = max_compressed_bytes
        self.max_pending_bytes = max_pending_bytes
        self.stats: Counter[str] = self.access.stats  # the logins' counters and the connections' in one
        self.max_connections = max_connections
        self.per_address = AddressCounts(max_connections_per_address)
        self.budget = InputBudget(max_buffered_bytes)
        self.stall_timeout = stall_timeout
        self.inactivity_timeout = inactivity_timeout
        self._clients: set[LumberjackClient] = set()
        self._handlers: set[gevent.Greenlet] = set()
        self._log_refusal = OnceASecond()
        self._log_inactive = OnceASecond()
        self._stopped = gevent.event.Event()
        self._server = StreamServer(listen, self._handle)
        self._server.init_socket()
        self.address: Address = self._server.address

    @property
    def clients(self) -> int:
        """Connections served now."""
        return len(self._handlers)

    def serve(self) -> None:
        """Accept connections until :meth:`stop`; then let the connections finish within ``grace`` seconds."""
        self._server.start()
        self._stopped.wait()

    def stop(self) -> None:
        """Safe from a gevent signal handler: wakes :meth:`serve`."""
        self._stopped.set()

    def close(self, grace: float) -> None:
        """Stop accepting, abort every connection (chunks being published finish and are acked)."""
        self._server.close()
        for client in list(self._clients):
            client.abort()
        handlers = list(self._handlers)
        gevent.joinall(handlers, timeout=grace)
        gevent.killall(handlers, block=True, timeout=1)

    def _handle(self, sock: socket.socket, address: Address) -> None:
        peer = f"{address[0]}:{address[1]}"
        if len(self._handlers) >= self.max_connections:  # Lumberjack has no error frame: closed at once
            self.stats["connections refused"] += 1
            self._log_refusal(f"{peer}: refused, {len(self._handlers)} connections open (--max-connections); "
                              f"{self.stats['connections refused']} refused so far")
            sock.close()
            return
        if not self.per_address.admit(address[0]):
            self.stats["refused connections per address"] += 1
            self._log_refusal(f"{peer}: refused, {self.per_address[address[0]]} connections of {address[0]} open "
                              f"(--max-clients-per-address); {self.stats['refused connections per address']} "
                              "refused so far")
            sock.close()
            return
        handler = gevent.getcurrent()
        self._handlers.add(handler)
        try:
            self._serve(sock, peer)
        finally:
            self._handlers.discard(handler)
            self.per_address.release(address[0])

    def _serve(self, sock: socket.socket, peer: str) -> None:
        self.stats["connections"] += 1
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # an ack must not wait for the previous one's ACK
        if self.tls is not None:
            sock.settimeout(HANDSHAKE_TIMEOUT)
            try:
                sock = self.tls.wrap_socket(sock, server_side=True)
            except (OSError, ValueError) as exc:
                self.stats["TLS handshakes failed"] += 1
                _log(f"{peer}: TLS handshake failed: {exc}")
                sock.close()
                return
            sock.settimeout(None)
        placed, login = self._place(sock, peer)
        if not placed:
            sock.close()
            return
        client = LumberjackClient(sock, peer, self.publisher, self.rule,
                                  AckWindow(max_compressed_bytes=self.max_compressed_bytes), self.stats, _log,
                                  self.max_pending_bytes, self.budget, self.stall_timeout, self.inactivity_timeout,
                                  self._log_inactive, login)
        self._clients.add(client)
        try:
            client.run()
        finally:
            self._clients.discard(client)
            sock.close()

    def _place(self, sock: socket.socket, peer: str) -> tuple[bool, Login | None]:
        """Whether the writer is let in, and its login (None without --users)."""
        access = self.access
        if not access.required:
            return True, None
        address = peer.rpartition(":")[0]
        login = Login(access, address)
        name = certificate_name(sock)
        if name is not None:
            placed = login.certificate(name)
            why = f"the client certificate names no user ({name})"
        else:
            placed = login.allowed_in
            why = "no client certificate naming a user (--users)"
        if not placed and access.refused("logins refused", address, time.monotonic()):
            _log(f"{peer}: refused, {why}; {self.stats['logins refused']} refused so far")
        return placed, login
