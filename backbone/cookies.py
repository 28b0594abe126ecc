"""Address validation: the stateless cookies a validating backbone asks new addresses to echo.

UDP sources are forged at will, so a KEEPALIVE naming a stranger's address
would aim the whole stream at that stranger.  With ``--validate-addresses`` the
backbone serves an address only once it has echoed a cookie sent to it: the
first HMAC-SHA256 bytes of the address and the current time slot, under a key
drawn when the backbone starts.  Only whoever reads that address can echo it,
and checking it needs no state: the cookies of the current and the previous slot
verify, so one lives between one and two slots (docs/protocol.md, "Address
validation"; the same idea as QUIC's Retry token and DNS cookies).

The one piece of state is which addresses got a COOKIE answer in the current
slot (bounded, forgotten at every slot): a forged KEEPALIVE makes the backbone
send its victim at most one small datagram per slot.

Pure: a key, addresses and times in; cookies and verdicts out.
"""
from __future__ import annotations

import hmac
import struct
from socket import inet_aton  # address conversion only: no sockets here

from fyrehose.protocol.codec import COOKIE_SIZE, Address, encode_cookie

SLOT_SECONDS = 10.0  # a cookie verifies in the slot it was made in and the next one
MIN_KEY = 16
ANSWERED_CAPACITY = 65536  # addresses answered with a cookie per slot; more wait for the next slot
_SLOT_AND_PORT = struct.Struct(">QH")


class CookieJar:
    """Makes and checks cookies under ``key``, and rations the COOKIE answers per address and slot."""

    def __init__(self, key: bytes, slot_seconds: float = SLOT_SECONDS,
                 answered_capacity: int = ANSWERED_CAPACITY) -> None:
        if len(key) < MIN_KEY:
            raise ValueError(f"a cookie key is at least {MIN_KEY} bytes")
        if not slot_seconds > 0:
            raise ValueError(f"slot_seconds must be more than 0, not {slot_seconds!r}")
        self._keyed = hmac.new(key, digestmod="sha256")  # copied per cookie: the key is not hashed in again
        self.slot_seconds = slot_seconds
        self.answered_capacity = answered_capacity
        self._answered: set[Address] = set()
        self._answered_slot = -1

    def slot(self, now: float) -> int:
        return int(now // self.slot_seconds)

    def _mac(self, addr: Address, slot: int) -> bytes:
        mac = self._keyed.copy()
        mac.update(inet_aton(addr[0]) + _SLOT_AND_PORT.pack(slot & 0xFFFFFFFFFFFFFFFF, addr[1]))
        return mac.digest()[:COOKIE_SIZE]

    def cookie(self, addr: Address, now: float) -> bytes:
        """The cookie of ``addr`` in the slot of ``now``."""
        return self._mac(addr, self.slot(now))

    def check(self, cookie: bytes, addr: Address, now: float) -> int | None:
        """0 for a cookie of the current slot, 1 for one of the previous slot (time to hand out a fresh one),
        None for any other bytes (forged, expired, another address's, another key's)."""
        if len(cookie) != COOKIE_SIZE:
            return None
        slot = self.slot(now)
        if hmac.compare_digest(cookie, self._mac(addr, slot)):
            return 0
        if hmac.compare_digest(cookie, self._mac(addr, slot - 1)):
            return 1
        return None

    def answer(self, addr: Address, now: float) -> bytes | None:
        """The COOKIE frame for ``addr``, or None when it had one in this slot already (or too many addresses
        did): the most a forged KEEPALIVE gets its victim is one such datagram per slot."""
        slot = self.slot(now)
        if slot != self._answered_slot:
            self._answered_slot = slot
            self._answered = set()
        if addr in self._answered or len(self._answered) >= self.answered_capacity:
            return None
        self._answered.add(addr)
        return encode_cookie(self._mac(addr, slot))
