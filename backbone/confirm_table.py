"""Recently confirmed PUSH tags in a fixed-size table over shared memory, so a restarted sequencer has them.

The multi-process backbone's sequencer may die (kill -9, OOM) between
sequencing a tagged PUSH and its CONFIRM reaching the publisher; the
publisher then retries with the same tag.  :class:`ConfirmCache` lives in the
sequencer's heap and dies with it, so a restarted sequencer would sequence
the retry a second time.  This table has the same interface over a region the
supervisor owns (an anonymous shared mapping, fyrehose.backbone.shared), so a
restarted sequencer answers the retry with the original number.

Layout: ``slots`` slots of four little-endian 8-byte words: ``key`` (source
IPv4 << 16 | port, plus 1 so that 0 means empty), ``tag``, ``seq`` and
``stamp`` (microseconds of the monotonic clock, which every process of the
host shares).  A tag hashes to a window of :data:`PROBE` consecutive slots;
remembering reuses the slot of the same source and tag, else the first empty
or expired one (older than ``max_age``), else the oldest in the window.
Memory is fixed, and what goes first is what is oldest.  An entry is found
until its slot is reused; a retry comes within the publisher's 25 s timeout
and tags are random per publisher, so an old entry never answers a new PUSH.

One writer (the sequencer), and a crash may stop it between any two stores:
the key is cleared first and written last, each an aligned 8-byte store, so a
reader never takes a half-written slot for a valid one.
"""
from __future__ import annotations

import socket

from fyrehose.addresses import Address

WORDS = 4
PROBE = 8
DEFAULT_SLOTS = 1 << 17  # 4 MiB: as many entries as the heap cache keeps
KEYS_CACHED = 4096
_MASK64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15


def _first(key: int, tag: int) -> int:
    """The first slot of the window of (key, tag), before masking (Fibonacci hashing)."""
    return ((((key * _GOLDEN) & _MASK64) ^ tag) * _GOLDEN & _MASK64) >> 40


class SharedConfirmTable:
    def __init__(self, buffer: memoryview, slots: int = DEFAULT_SLOTS, max_age: float = 30.0) -> None:
        if slots < PROBE or slots & (slots - 1):
            raise ValueError("slots must be a power of two, at least PROBE")
        self.slots = slots
        self.max_age = max_age
        self._words = memoryview(buffer).cast("B")[:self.region_size(slots)].cast("Q")
        self._max_age_us = int(max_age * 1_000_000)
        self._keys: dict[Address, int] = {}

    @staticmethod
    def region_size(slots: int = DEFAULT_SLOTS) -> int:
        return slots * WORDS * 8

    def __len__(self) -> int:
        words = self._words
        return sum(1 for slot in range(self.slots) if words[slot * WORDS])

    def _key(self, source: Address) -> int:
        key = self._keys.get(source)
        if key is None:  # a handful of publishers send most PUSHes: each address is converted once
            if len(self._keys) >= KEYS_CACHED:
                self._keys.clear()
            key = self._keys[source] = (int.from_bytes(socket.inet_aton(source[0]), "big") << 16 | source[1]) + 1
        return key

    def lookup(self, source: Address, tag: int) -> int | None:
        """The sequence ``tag`` from ``source`` got, while its slot holds it.

        Slots are never emptied and :meth:`remember` fills the first empty one
        of a window, so the search stops at an empty slot.
        """
        key = self._key(source)
        words = self._words
        mask = self.slots - 1
        first = _first(key, tag)
        for i in range(PROBE):
            base = ((first + i) & mask) * WORDS
            slot_key = words[base]
            if not slot_key:
                return None
            if slot_key == key and words[base + 1] == tag:
                return words[base + 2]
        return None

    def remember(self, source: Address, tag: int, seq: int, now: float) -> None:
        key = self._key(source)
        words = self._words
        mask = self.slots - 1
        first = _first(key, tag)
        stamp = int(now * 1_000_000)
        horizon = stamp - self._max_age_us
        victim = -1
        victim_stamp = None  # None: nothing chosen; -1: an expired slot; else the chosen live slot's stamp
        for i in range(PROBE):
            base = ((first + i) & mask) * WORDS
            slot_key = words[base]
            if not slot_key or (slot_key == key and words[base + 1] == tag):
                victim = base  # the first empty slot ends the window's used part (see lookup)
                break
            slot_stamp = words[base + 3]
            if slot_stamp < horizon:
                if victim_stamp != -1:
                    victim, victim_stamp = base, -1
            elif victim_stamp is None or (victim_stamp != -1 and slot_stamp < victim_stamp):
                victim, victim_stamp = base, slot_stamp
        words[victim] = 0  # invalid while its fields change: a crash here leaves an empty slot
        words[victim + 1] = tag
        words[victim + 2] = seq
        words[victim + 3] = stamp
        words[victim] = key
