"""Recently confirmed PUSH tags, kept where a restarted sequencer finds them: a record ring in shared memory.

The multi-process backbone's sequencer may die (kill -9, OOM) between
sequencing a tagged PUSH and its CONFIRM reaching the publisher; the
publisher then retries with the same tag.  A :class:`ConfirmCache` in the
sequencer's heap dies with it, so a restarted sequencer would sequence the
retry a second time.  This table answers lookups from such a heap cache, as
the single-process backbone does, and also appends every confirmed tag to a
ring of records over a region the supervisor owns (an anonymous shared
mapping, fyrehose.backbone.multiprocess.shared).  A restarted sequencer replays the ring
into its new cache, so it answers the retry with the original number.

Appending is one copy per datagram, where a hash table in shared memory cost
a probe per tag; the price is the replay at start (a fraction of a second for
the default 131,072 records), paid only after a crash.

Layout: word 0 counts the records ever written (the *head*); then ``slots``
records of five little-endian 8-byte words: ``key`` (source IPv4 << 16 |
port, plus 1), ``tag``, ``count``, ``seq`` and ``stamp`` (microseconds of the
monotonic clock, which every process of the host shares): tags ``tag`` ..
``tag + count - 1`` got sequences ``seq`` ...  Record ``n`` lives in slot
``n % slots``.  A datagram of consecutively tagged frames (a publisher's
batch) is one record.

One writer (the sequencer), and a crash may stop it anywhere: the records of
a datagram are copied first and the head (an aligned 8-byte store) moves
after them, so records at or past the head are never replayed.  A copy
interrupted mid-way may have torn records it was overwriting, the oldest
ones; a datagram holds at most ``margin`` tags, so the replay skips the
oldest ``margin`` records of the ring.  Records older than ``max_age`` are
skipped as well: a publisher retries within its 25 s timeout.  So are records
of numbers above ``published`` (the last number the dead sequencer made
visible): it remembered those tags while sequencing a datagram it never got
to publish, so the messages were never delivered nor CONFIRMed, and their
numbers will be issued again; a retry must be sequenced anew, not answered
with a number that now belongs to another message.
"""
from __future__ import annotations

import sys
from array import array
from collections.abc import Sequence
from socket import inet_aton, inet_ntoa

from fyrehose.backbone.confirms import ConfirmCache
from fyrehose.protocol import codec
from fyrehose.protocol.codec import Address

WORDS = 5
RECORD = WORDS * 8
HEADER = 8
DEFAULT_SLOTS = 1 << 17  # 5 MiB
MAX_TAGS_PER_DATAGRAM = codec.MAX_DATAGRAM // codec.FRAME_HEADER + 1
KEYS_CACHED = 4096


class SharedConfirmTable:
    def __init__(self, buffer: memoryview, now: float, slots: int = DEFAULT_SLOTS, max_age: float = 30.0,
                 margin: int = MAX_TAGS_PER_DATAGRAM, published: int | None = None) -> None:
        """``now``: the monotonic clock's seconds, the time the ring's records were stamped with; records older than
        ``max_age`` at ``now`` are not replayed."""
        if slots <= margin:
            raise ValueError("slots must exceed the margin of torn records")
        self.slots = slots
        self.margin = margin
        self.max_age = max_age
        region = memoryview(buffer).cast("B")[:self.region_size(slots)]
        self._head = region[:HEADER].cast("Q")
        self._records = region[HEADER:]
        self._keys: dict[Address, int] = {}
        self._cache = ConfirmCache(capacity=slots - margin, max_age=max_age)
        self._replay(published, now)

    @staticmethod
    def region_size(slots: int = DEFAULT_SLOTS) -> int:
        return HEADER + slots * RECORD

    def __len__(self) -> int:
        return len(self._cache)

    def lookup(self, source: Address, tag: int) -> int | None:
        """The sequence ``tag`` from ``source`` got, while it is remembered."""
        return self._cache.lookup(source, tag)

    def known(self, source: Address, tags: Sequence[int]) -> bool:
        """Whether any of ``tags`` from ``source`` is remembered."""
        return self._cache.known(source, tags)

    def remember_runs(self, source: Address, runs: list[codec.Run], now: float) -> None:
        """Remember one datagram's runs from ``source``: in the heap, then in the ring."""
        count = len(runs)
        if not count:
            return
        if count > self.margin:
            raise ValueError(f"{count} runs at once exceed the margin of {self.margin}")
        self._cache.remember_runs(source, runs, now)
        words = array("Q", bytes(RECORD * count))  # the records' columns filled whole, not a record at a time
        words[0::WORDS] = array("Q", [self._key(source)]) * count
        for column, values in enumerate(zip(*runs, strict=True), start=1):
            words[column::WORDS] = array("Q", values)
        words[4::WORDS] = array("Q", [int(now * 1_000_000)]) * count
        if sys.byteorder == "big":
            words.byteswap()
        data = words.tobytes()
        head = self._head[0]
        start = (head % self.slots) * RECORD
        first = min(len(data), len(self._records) - start)
        self._records[start:start + first] = data[:first]
        if first < len(data):  # wrapped around
            self._records[:len(data) - first] = data[first:]
        self._head[0] = head + count  # last: records at or past the head are never replayed

    def _key(self, source: Address) -> int:
        key = self._keys.get(source)
        if key is None:  # a handful of publishers send most PUSHes: each address is converted once
            if len(self._keys) >= KEYS_CACHED:
                self._keys.clear()
            key = self._keys[source] = (int.from_bytes(inet_aton(source[0]), "big") << 16 | source[1]) + 1
        return key

    def _replay(self, published: int | None, now: float) -> None:
        """Load the ring's trustworthy records, oldest first, into the heap cache (none above ``published``)."""
        head = self._head[0]
        first = max(0, head - (self.slots - self.margin))
        horizon = int((now - self.max_age) * 1_000_000)
        sources: dict[int, Address] = {}
        words = self._records.cast("Q")
        for number in range(first, head):
            base = (number % self.slots) * WORDS
            key, tag, count, seq, stamp = words[base:base + WORDS]
            if published is not None:  # numbers past it were never published: their tags are not confirmed
                count = min(count, published - seq + 1)
            if stamp < horizon or not key or count < 1:
                continue
            source = sources.get(key)
            if source is None:
                packed = key - 1
                source = sources[key] = (inet_ntoa((packed >> 16).to_bytes(4, "big")), packed & 0xFFFF)
            self._cache.remember_runs(source, [(tag, count, seq)], stamp / 1_000_000)
