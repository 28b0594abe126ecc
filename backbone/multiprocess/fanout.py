"""A fan-out worker: sends the shared log to its slice of the subscribers with sendmmsg.

The log holds DELIVER frames exactly as they go on the wire, so a datagram is
a list of slices of shared memory (an iovec), described once and queued for
each subscriber.  BATCH subscribers get the frames packed greedily up to
``batch_bytes``; a partly filled datagram goes out as soon as the log is
momentarily empty, so an idle backbone answers at once and a loaded one sends
full datagrams.  Plain subscribers get one frame per datagram.

With ``--multicast``, worker 0 also sends each datagram, packed as for
BATCH subscribers, once to the group; subscribers that joined it (KEEPALIVE
flag MULTICAST) get nothing unicast.

Worker ``i`` of ``F`` serves the clients whose address hashes to ``i``: a
client keeps its worker while the table changes around it, so it never gets
a stretch of the log twice or not at all.  Table changes arrive in the log,
between the messages, so each message goes to the subscribers of the moment
the sequencer issued it, as in the single-process backbone.
"""
from __future__ import annotations

import ctypes
import socket
from collections import Counter
from collections.abc import Callable

from fyrehose.backbone.host.sendmmsg import Sender
from fyrehose.backbone.multiprocess import records
from fyrehose.backbone.multiprocess.rings import Doorbell, Ring
from fyrehose.backbone.multiprocess.shared import CounterBlock, SubscriberTable
from fyrehose.backbone.pushes import LogEntry, batch_parts
from fyrehose.protocol.codec import FLAG_BATCH, FLAG_MULTICAST, FLAG_NOSUBSCRIBE, Address

READ_LIMIT = 4096  # log records per round
IDLE_WAIT = 0.2


def worker_of(addr: Address, workers: int) -> int:
    """Which fan-out worker serves ``addr`` (stable for as long as the address is)."""
    a, b, c, d = (int(part) for part in addr[0].split("."))
    key = (((a << 24) | (b << 16) | (c << 8) | d) << 16) | addr[1]
    mixed = (key * 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF  # Fibonacci hashing: the high bits mix every key bit
    return (mixed >> 32) % workers


class FanOut:
    def __init__(self, index: int, workers: int, log: Ring, bell: Doorbell, table: SubscriberTable,
                 sock: socket.socket, counter_block: CounterBlock, batch_bytes: int,
                 stopping: Callable[[], bool], group: Address | None = None) -> None:
        self.index = index
        self.workers = workers
        self.log = log
        self.bell = bell
        self.counter_block = counter_block
        self.counters: Counter = counter_block.load()
        self.sender = Sender(sock, self.counters)
        self.batch_bytes = batch_bytes
        self.stopping = stopping
        self._data_at = ctypes.addressof(ctypes.c_char.from_buffer(log.data))
        self._plain: list[int] = []
        self._batch: list[int] = []
        self._group_address = group if index == 0 else None  # one worker sends the group its copy
        self._group: int | None = None
        # Running workers follow the table in the log; a restarted one starts from the latest copy.
        self._use_clients(table.snapshot()[1])

    def run(self) -> None:
        """Serve until stopped, then send what the log still holds before returning."""
        while True:
            if self._round():
                continue
            if self.stopping():
                if not self.log.backlog(self.index):
                    return
                continue
            self.bell.clear()
            if self.log.backlog(self.index):
                continue
            self.bell.wait(IDLE_WAIT)

    def _use_clients(self, rows: list[tuple[Address, int]]) -> None:
        """Serve, from now on, the subscribers among ``rows`` that belong to this worker."""
        sender = self.sender
        if sender.destinations > 2 * len(rows) + 1024:
            sender.forget_destinations()  # nothing is queued between groups
        plain: list[int] = []  # destination numbers of the sender
        batch: list[int] = []
        for addr, flags in rows:
            if flags & (FLAG_NOSUBSCRIBE | FLAG_MULTICAST) or worker_of(addr, self.workers) != self.index:
                continue
            (batch if flags & FLAG_BATCH else plain).append(sender.destination(addr))
        self._plain, self._batch = plain, batch
        if self._group_address is not None:
            self._group = sender.destination(self._group_address)

    def _round(self) -> bool:
        spans, position = self.log.read(self.index, READ_LIMIT)
        if not spans:
            return False
        data, base = self.log.data, self._data_at
        header = records.LOG_HEADER_SIZE
        group: list[LogEntry] = []
        for offset, length, _ in spans:
            count, step = records.unpack_log_header(data[offset:offset + header])
            start = offset + header
            if count == records.CLIENTS:
                self._send(group)  # what was sequenced before the change goes to the clients of before
                group = []
                self._use_clients(records.unpack_clients(data[start:offset + length]))
                continue
            group.append(LogEntry(data[start:offset + length], count, step, address=base + start))
        self._send(group)
        self.log.release(self.index, position)  # only now may the sequencer reuse those bytes
        self.counter_block.store(self.counters)
        return True

    def _send(self, entries: list[LogEntry]) -> None:
        plain, batch, group = self._plain, self._batch, self._group
        if not entries or not (plain or batch or group is not None):
            return
        sender = self.sender
        before = sender.sent
        if batch or group is not None:
            for parts in batch_parts(entries, self.batch_bytes):
                iovec = sender.iovec([(entry.address + lo, hi - lo) for entry, lo, hi in parts])
                if group is not None:
                    sender.add(group, iovec)
                    self.counters["multicast datagrams"] += 1
                for dest in batch:
                    sender.add(dest, iovec)
        if plain:
            for entry in entries:
                at = entry.address
                for lo, hi in entry.frame_bounds():
                    iovec = sender.iovec([(at + lo, hi - lo)])
                    for dest in plain:
                        sender.add(dest, iovec)
        sender.flush()
        counters = self.counters
        counters["delivered"] += sum(entry.count for entry in entries) * (len(plain) + len(batch) + (group is not None))
        counters["datagrams out"] += sender.sent - before
