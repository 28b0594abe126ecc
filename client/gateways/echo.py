"""Keeping a client's own messages from its own subscriptions ("no echo"), exactly, by sequence number.

Marlin clients receive what *other* clients publish (docs/gateways.md, "Marlin MESSAGE (0x03)"), and a NATS
client may ask for the same (``echo: false``).  A gateway learns the sequence
numbers of a client's messages only when the backbone confirms them, and the
messages themselves may come back through the stream a moment before that.
So while a client's publish is unconfirmed, whatever is routed to it is held;
once the numbers are known the held frames are released minus the client's
own, and later frames are checked against those numbers directly.  The held
bytes are bounded; beyond ``max_held`` the client is a slow consumer.

Pure: the connection calls :meth:`publishing` / :meth:`published` around each
publish and passes every frame for the client through :meth:`offer`.
"""
from __future__ import annotations

from collections import deque


class HeldTooMuch(Exception):
    """More than ``max_held`` bytes wait for a publish to be confirmed."""


class EchoFilter:
    def __init__(self, max_held: int) -> None:
        self.max_held = max_held
        self._own: deque[int] = deque()  # this client's sequence numbers not yet seen in the stream
        self._held: list[tuple[int, bytes]] = []
        self._held_bytes = 0
        self._in_flight = False

    def publishing(self) -> None:
        self._in_flight = True

    def published(self, seqs: list[int] | None, position: int) -> list[bytes]:
        """The publish ended (``seqs``: its numbers, None if unknown); the held frames to send now.

        ``position`` is the last sequence the stream has routed: numbers up to
        it will not come again, so they need not be remembered.
        """
        self._in_flight = False
        if seqs:
            self._own.extend(seqs)
        held, self._held, self._held_bytes = self._held, [], 0
        released = [frame for seq, frame in held if not self._is_own(seq)]
        own = self._own
        while own and own[0] <= position:
            own.popleft()
        return released

    def offer(self, seq: int, frame: bytes) -> bytes | None:
        """``frame`` if it may be sent now; None if it is held or is the client's own."""
        if self._in_flight:
            self._held.append((seq, frame))
            self._held_bytes += len(frame)
            if self._held_bytes > self.max_held:
                raise HeldTooMuch(f"more than {self.max_held} bytes held for an unconfirmed publish")
            return None
        return None if self._is_own(seq) else frame

    def _is_own(self, seq: int) -> bool:
        own = self._own
        while own and own[0] < seq:
            own.popleft()
        return bool(own) and own[0] == seq
