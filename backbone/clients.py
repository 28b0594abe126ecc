"""The backbone's table of live clients (subscribers and journaling clients).

A client lives for ``lifetime`` seconds after its last KEEPALIVE (docs/protocol.md,
backbone rule 2: five seconds).  Lists of subscribers and journalers are cached between changes
because every PUSH walks them.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

from fyrehose.protocol.codec import FLAG_BATCH, FLAG_MULTICAST, FLAG_NOJOURNAL, FLAG_NOSUBSCRIBE, Address

CLIENT_LIFETIME = 5.0


@dataclass(slots=True)
class ClientEntry:
    addr: Address
    flags: int
    expires: float

    @property
    def subscribes(self) -> bool:
        return not self.flags & FLAG_NOSUBSCRIBE

    @property
    def journals(self) -> bool:
        return not self.flags & FLAG_NOJOURNAL

    @property
    def batches(self) -> bool:
        return bool(self.flags & FLAG_BATCH)

    @property
    def unicast(self) -> bool:
        """Whether DELIVERs go to this client's own address (it subscribes and has not joined the group)."""
        return not self.flags & (FLAG_NOSUBSCRIBE | FLAG_MULTICAST)


class ClientTable:
    def __init__(self, capacity: int = 65536, lifetime: float = CLIENT_LIFETIME) -> None:
        self.capacity = capacity
        self.lifetime = lifetime
        self._entries: dict[Address, ClientEntry] = {}
        self._next_expiry = float("inf")
        self._views: tuple[list[Address], list[Address], list[Address]] | None = None

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, addr: Address) -> ClientEntry | None:
        return self._entries.get(addr)

    def refresh(self, addr: Address, flags: int, now: float) -> bool:
        """Record a KEEPALIVE; False when the table is full and ``addr`` is new."""
        expires = now + self.lifetime
        entry = self._entries.get(addr)
        if entry is None:
            if len(self._entries) >= self.capacity:
                self.expire(now)
                if len(self._entries) >= self.capacity:
                    return False
            self._entries[addr] = ClientEntry(addr, flags, expires)
            self._views = None
        else:
            if entry.flags != flags:
                entry.flags = flags
                self._views = None
            entry.expires = expires
        if expires < self._next_expiry:
            self._next_expiry = expires
        return True

    def adopt(self, addr: Address, flags: int, expires: float) -> bool:
        """Take a client over from another backbone's table (a standby following its primary)."""
        entry = self._entries.get(addr)
        if entry is None and len(self._entries) >= self.capacity:
            return False
        if entry is None or entry.flags != flags:
            self._views = None
        self._entries[addr] = ClientEntry(addr, flags, expires)
        if expires < self._next_expiry:
            self._next_expiry = expires
        return True

    def members(self, now: float) -> list[tuple[Address, int, float]]:
        """(address, flags, seconds since its last KEEPALIVE) of every live client."""
        return [(entry.addr, entry.flags, self.lifetime - (entry.expires - now))
                for entry in self._entries.values() if entry.expires > now]

    def expire(self, now: float) -> int:
        """Forget clients whose lifetime ran out; cheap when none is due."""
        if now < self._next_expiry:
            return 0
        dead = [addr for addr, entry in self._entries.items() if entry.expires <= now]
        for addr in dead:
            del self._entries[addr]
        self._next_expiry = min((e.expires for e in self._entries.values()), default=float("inf"))
        if dead:
            self._views = None
        return len(dead)

    def counts(self, now: float) -> dict[str, int]:
        """Live clients by kind, without mutating the table (safe from the metrics thread)."""
        live = [e for e in list(self._entries.values()) if e.expires > now]
        return {
            "plain subscribers": sum(1 for e in live if e.unicast and not e.batches),
            "batch subscribers": sum(1 for e in live if e.unicast and e.batches),
            "multicast subscribers": sum(1 for e in live if e.subscribes and not e.unicast),
            "journalers": sum(1 for e in live if e.journals),
            "clients": len(live),
        }

    def _build_views(self) -> tuple[list[Address], list[Address], list[Address]]:
        if self._views is None:
            entries = self._entries.values()
            self._views = (
                [e.addr for e in entries if e.unicast and not e.batches],
                [e.addr for e in entries if e.unicast and e.batches],
                [e.addr for e in entries if e.journals],
            )
        return self._views

    def subscribers(self, now: float) -> tuple[list[Address], list[Address]]:
        """(plain subscribers, BATCH subscribers) alive at ``now`` that get their DELIVERs unicast."""
        self.expire(now)
        plain, batch, _ = self._build_views()
        return plain, batch

    def journalers(self, now: float) -> list[Address]:
        self.expire(now)
        return self._build_views()[2]

    def choose_journaler(self, now: float, exclude: Address, rng: random.Random) -> Address | None:
        """A random live client without NOJOURNAL other than ``exclude`` (docs/protocol.md, backbone rule 4)."""
        candidates = self.journalers(now)
        if not candidates:
            return None
        choice = rng.choice(candidates)
        if choice != exclude:
            return choice
        others = [c for c in candidates if c != exclude]
        return rng.choice(others) if others else None
