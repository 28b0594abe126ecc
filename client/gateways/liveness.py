"""Deadlines a gateway keeps on each client without input: handshake, keepalive PINGs, idle timeout.

A client that connects and then says nothing holds a slot of
``--max-clients`` for ever unless someone ends it; nats-server closes a
client that does not send CONNECT in time and one that stops answering its
PINGs, and redis-server closes a client idle for longer than its ``timeout``
(pub/sub clients excepted), as Logstash's beats input does with its
``client_inactivity_timeout``.  These are those rules, pure: times in
(``time.monotonic()`` seconds), decisions out; the drivers (the TCP server,
:mod:`fyrehose.gateways.drivers.tcp`, and the Lumberjack connection) ask
:meth:`next_deadline` when to call back.
"""
from __future__ import annotations

from dataclasses import dataclass

PING = "ping"  # send the client a PING
HANDSHAKE_TIMEOUT = "handshake timeout"  # close: no CONNECT in time
STALE = "stale"  # close: PINGs unanswered
IDLE = "idle"  # close: nothing received for the idle timeout


@dataclass
class NatsLiveness:
    """nats-server's rules: CONNECT within ``handshake_timeout``; then a PING whenever the client was
    silent for ``ping_interval``; stale once ``max_pings_out`` PINGs are unanswered."""

    accepted: float
    handshake_timeout: float = 2.0
    ping_interval: float = 120.0
    max_pings_out: int = 2
    connected: bool = False
    pings_out: int = 0
    last_ping: float = 0.0

    def connect(self) -> None:
        self.connected = True

    def pong(self) -> None:
        self.pings_out = 0

    def next_deadline(self, last_input: float) -> float:
        if not self.connected:
            return self.accepted + self.handshake_timeout
        return max(last_input, self.last_ping) + self.ping_interval

    def handle_timers(self, now: float, last_input: float) -> str | None:
        """What to do now: PING, close (HANDSHAKE_TIMEOUT, STALE) or nothing yet."""
        if now < self.next_deadline(last_input):
            return None
        if not self.connected:
            return HANDSHAKE_TIMEOUT
        if self.pings_out >= self.max_pings_out:
            return STALE
        self.pings_out += 1
        self.last_ping = now
        return PING


@dataclass
class IdleTimeout:
    """Close a client silent for ``seconds`` (0: never), unless it is ``exempt``: a client that is waiting
    for the gateway is not idle.  redis-server's ``timeout`` (a subscriber is exempt) and Logstash's beats
    input's ``client_inactivity_timeout`` (a connection whose events are being published is exempt)."""

    seconds: float = 0.0

    def next_deadline(self, last_input: float, exempt: bool) -> float | None:
        if not self.seconds or exempt:
            return None
        return last_input + self.seconds

    def handle_timers(self, now: float, last_input: float, exempt: bool) -> str | None:
        at = self.next_deadline(last_input, exempt)
        return IDLE if at is not None and now >= at else None
