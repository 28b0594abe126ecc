"""The multi-process backbone's shared memory: one anonymous shared mapping per structure.

Every structure is an anonymous ``MAP_SHARED`` mapping made by the supervisor
before it forks the workers, which inherit it.  Nothing has a name, so
nothing appears in /dev/shm, nothing can leak when a process is killed (the
kernel frees a mapping with its last process), and Python's
multiprocessing resource tracker, which on 3.11 unlinks named segments that a
child merely attached to, never gets involved.

Layout, all little-endian 8-byte words:

- ``CounterBlock``: one block of counters per process (role), written only by
  that process and summed by the supervisor for metrics;
- ``SequencerState``: the last sequence issued (stored before the log is
  published, so a restarted sequencer continues above it) and the client
  gauges;
- ``SubscriberTable``: the live clients and their flags, written by the
  sequencer under a sequence lock, read by a restarted sequencer or fan-out
  worker (running ones get every change in line with the log);
- ``Words``: one word per process, e.g. the stop flag the supervisor raises to
  drain and stop a worker.
"""
from __future__ import annotations

import mmap
from collections import Counter

from fyrehose.backbone.multiprocess.records import CLIENT_SIZE, unpack_clients
from fyrehose.protocol.codec import Address

# Every counter a backbone process keeps; keys of Backbone.counters and of the workers' own.
COUNTER_NAMES = (
    "pushes", "delivered", "datagrams out", "keepalives", "requests", "forwards", "confirms",
    "duplicate pushes", "redelivery requests", "redelivered", "multicast datagrams",
    "drop:malformed", "drop:oversize", "drop:unexpected type", "drop:foreign address",
    "drop:ring full", "drop:client table full", "drop:request beyond last sequence",
    "drop:no journaling client", "drop:sequence space exhausted", "drop:send error",
    "drop:send buffer full", "drop:receive error", "drop:rate limited", "drop:redelivery queue full",
    "cookies", "drop:unvalidated address", "drop:bad cookie", "drop:other",
)
_SLOT = {name: index for index, name in enumerate(COUNTER_NAMES)}
_OTHER = _SLOT["drop:other"]
COUNTER_SLOTS = 32


def anonymous(size: int) -> mmap.mmap:
    """Shared memory inherited across fork(): MAP_SHARED | MAP_ANONYMOUS, zero-filled.

    Every page is touched here, once, so that no worker takes a page fault on
    its hot path the first time a ring wraps into it.
    """
    region = mmap.mmap(-1, max(size, mmap.PAGESIZE), flags=mmap.MAP_SHARED | mmap.MAP_ANONYMOUS)
    region.write(bytes(len(region)))
    region.seek(0)
    return region


class CounterBlock:
    """Counters of one process; ``store`` copies a Counter in, ``load`` reads it back."""

    SIZE = COUNTER_SLOTS * 8

    def __init__(self, buffer: memoryview) -> None:
        self._slots = memoryview(buffer).cast("B")[:self.SIZE].cast("Q")

    def store(self, counters: Counter) -> None:
        slots = self._slots
        other = 0
        for name, value in counters.items():
            index = _SLOT.get(name)
            if index is None:
                other += value
            elif slots[index] != value:
                slots[index] = value
        if other:
            slots[_OTHER] = other

    def load(self) -> Counter:
        slots = self._slots
        return Counter({name: slots[i] for i, name in enumerate(COUNTER_NAMES) if slots[i]})


class SequencerState:
    """What survives a sequencer crash besides the client table: the last sequence issued, and gauges."""

    GAUGES = ("plain subscribers", "batch subscribers", "journalers", "clients", "multicast subscribers")
    SIZE = 8 * (1 + len(GAUGES))

    def __init__(self, buffer: memoryview) -> None:
        self._words = memoryview(buffer).cast("B")[:self.SIZE].cast("Q")

    @property
    def last_issued(self) -> int:
        return self._words[0]

    @last_issued.setter
    def last_issued(self, value: int) -> None:
        self._words[0] = value

    def store_gauges(self, counts: dict[str, int]) -> None:
        for i, name in enumerate(self.GAUGES, 1):
            self._words[i] = counts.get(name, 0)

    def gauges(self) -> dict[str, int]:
        return {name: self._words[i] for i, name in enumerate(self.GAUGES, 1)}


class SubscriberTable:
    """Live clients (address and flags), written by the sequencer, read by restarted workers.

    A sequence lock: the writer makes the version odd, writes, makes it even
    again; a reader retries when the version was odd or changed under it.
    """

    HEADER = 16

    def __init__(self, buffer: memoryview, capacity: int) -> None:
        view = memoryview(buffer).cast("B")
        self.capacity = capacity
        self._words = view[:self.HEADER].cast("Q")  # [0] version, [1] count
        self._entries = view[self.HEADER:self.HEADER + capacity * CLIENT_SIZE]

    @staticmethod
    def region_size(capacity: int) -> int:
        return SubscriberTable.HEADER + capacity * CLIENT_SIZE

    @property
    def version(self) -> int:
        return self._words[0]

    def publish(self, packed: bytes) -> None:
        """Store a table packed by :func:`fyrehose.backbone.multiprocess.records.pack_clients`."""
        packed = packed[:self.capacity * CLIENT_SIZE]
        words = self._words
        version = words[0] | 1
        words[0] = version  # odd: being written
        self._entries[:len(packed)] = packed
        words[1] = len(packed) // CLIENT_SIZE
        words[0] = version + 1

    def snapshot(self, attempts: int = 1000) -> tuple[int, list[tuple[Address, int]]]:
        """(version, [(address, flags), ...]); an empty table if a writer died mid-update."""
        words = self._words
        for _ in range(attempts):
            before = words[0]
            if before & 1:
                continue
            count = min(words[1], self.capacity)
            blob = bytes(self._entries[:count * CLIENT_SIZE])
            if words[0] == before:
                return before, unpack_clients(blob)
        return words[0], []


class Words:
    """One 8-byte word per process, written by one process and read by others: stop flags (raised by
    the supervisor to drain and stop a worker), a receive worker's busy flag and its arrival watermark."""

    def __init__(self, buffer: memoryview, count: int) -> None:
        self._words = memoryview(buffer).cast("B")[:8 * count].cast("Q")

    def __getitem__(self, index: int) -> int:
        return self._words[index]

    def __setitem__(self, index: int, value: int) -> None:
        self._words[index] = int(value)
