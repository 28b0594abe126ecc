"""The sequencer: the one process that owns the sequence counter and the client table.

It applies the receive workers' records to the pure :class:`Backbone`, writes
the sequenced DELIVER frames into the shared log for the fan-out workers, and
sends the small answers itself (KEEPALIVE-ACK, CONFIRM, FORWARD), always after
the state they report: an ACK means the client is in the table the fan-out
workers read, a CONFIRM or HEAD means the message is in the log.

Sequence numbers are never reused, even when this process is killed: a new
block of numbers is persisted before any of it is published, and the last
number issued is stored in shared memory before the log records carrying it
become visible; a restarted sequencer continues after that number.

With several receive workers the sequencer merges their rings in the order
the kernel received the datagrams, as one socket would have: each ring keeps
its own order, and a record is taken once no worker can still hold an earlier
datagram: every worker is either idle (not mid-drain, socket queue empty) or
its watermark has passed the record's arrival.  A worker that stops making
progress (descheduled, stopped, dead) holds the others back by at most
``ORDER_HOLD``.
"""
from __future__ import annotations

import fcntl
import heapq
import itertools
import socket
import termios
import time
from collections.abc import Callable, Iterator, Sequence
from typing import cast

from fyrehose.backbone.core import Backbone
from fyrehose.backbone.host.statefile import ReservationWriter, SequenceStateFile
from fyrehose.backbone.host.udp import send_all
from fyrehose.backbone.intake import KeepaliveIn, RequestIn
from fyrehose.backbone.multiprocess import records
from fyrehose.backbone.multiprocess.confirm_table import SharedConfirmTable
from fyrehose.backbone.multiprocess.rings import Doorbell, Ring
from fyrehose.backbone.multiprocess.shared import CounterBlock, SequencerState, SubscriberTable, Words

READ_LIMIT = 1024  # records taken from one ring per round, so no receive worker starves the others
IDLE_WAIT = 0.1  # seconds; also the resolution of client expiry while idle
LOG_FULL_WAIT = 0.0005
ORDER_HOLD = 50_000_000  # ns a record may wait for a stalled receive worker's earlier datagrams


def in_arrival_order(rings: list[list[tuple[int, tuple]]], cutoff: int) -> Iterator[tuple[int, tuple]]:
    """Merge per-ring lists of (arrival, item) into (ring, item), earliest arrival first, up to ``cutoff``.

    Each ring's own order is kept even if its clock went backwards; the merge
    stops at the first head that arrived after ``cutoff``.
    """
    tagged = [[(arrival, index, item) for arrival, item in ring] for index, ring in enumerate(rings)]
    merged = heapq.merge(*tagged, key=lambda entry: entry[0])
    for _arrival, index, item in itertools.takewhile(lambda entry: entry[0] <= cutoff, merged):
        yield index, item


def restored_backbone(state: SequencerState, table: SubscriberTable, counter_block: CounterBlock,
                      now: float, confirmed: SharedConfirmTable, **backbone_options) -> Backbone:
    """A Backbone that continues where the previous sequencer (if any) stopped.

    Numbers continue after the last one issued; the clients of the shared
    table live on (for a full lifetime from ``now``); counters keep counting;
    tags confirmed before a crash are still answered with their sequence.
    """
    backbone = Backbone(reserved=state.last_issued, confirmed=confirmed, **backbone_options)
    backbone.counters = counter_block.load()
    for addr, flags in table.snapshot()[1]:
        backbone.clients.refresh(addr, flags, now)
    return backbone


def _queued(sock: socket.socket) -> bool:
    """Whether a datagram waits in ``sock``'s receive queue (FIONREAD: the size of the next one)."""
    return int.from_bytes(fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0\0\0\0"), "little") > 0


class Sequencer:
    def __init__(self, backbone: Backbone, rings: list[Ring], log: Ring, bell: Doorbell,
                 fanout_bells: list[Doorbell], sock: socket.socket, state: SequencerState,
                 table: SubscriberTable, counter_block: CounterBlock, state_file: SequenceStateFile,
                 stopping: Callable[[], bool], receiver_sockets: Sequence[socket.socket] = (),
                 busy: Words | None = None, watermarks: Words | None = None) -> None:
        self.backbone = backbone
        self.rings = rings
        self.log = log
        self.bell = bell
        self.fanout_bells = fanout_bells
        self.sock = sock
        self.state = state
        self.table = table
        self.counter_block = counter_block
        self.reservations = ReservationWriter(state_file, backbone.sequence.reserved)
        self.stopping = stopping
        self.receiver_sockets = list(receiver_sockets)
        self.busy = busy
        self.watermarks = watermarks
        self._held: int | None = None  # arrival of the earliest record held back for order
        self._views: tuple[list, list, list] | None = None
        self._gauges_at = 0.0

    def run(self) -> None:
        """Serve until stopped, then drain every ring before returning."""
        try:
            self._serve()
        finally:
            self.reservations.close()

    def _serve(self) -> None:
        while True:
            if self._round(time.monotonic()):
                continue
            if self.stopping() and self._held is None:
                if not any(ring.backlog() for ring in self.rings):
                    return
                continue
            self.bell.clear()
            if self._held is not None:
                self.bell.wait(max(0.0, (self._held + ORDER_HOLD - time.time_ns()) / 1e9))
                continue
            if any(ring.backlog() for ring in self.rings):
                continue
            now = time.monotonic()
            due = self.backbone.next_deadline(now)  # paced re-deliveries go on without a datagram to wake us
            self.bell.wait(IDLE_WAIT if due is None else min(IDLE_WAIT, due - now))

    def _take(self) -> tuple[list[tuple[Ring, int, int]], dict[int, int]]:
        """The records to apply now, in order, and how far to release each ring afterwards."""
        rings = self.rings
        self._held = None
        if self.busy is None:  # one receive worker: its ring is already in arrival order
            spans, position = rings[0].read(0, READ_LIMIT)
            return [(rings[0], offset, length) for offset, length, _ in spans], {0: position} if spans else {}
        checked = time.time_ns()
        busy, watermarks = self.busy, self.watermarks
        assert watermarks is not None  # given with busy
        cutoff = checked
        if not self.stopping():
            for i, sock in enumerate(self.receiver_sockets):
                if busy[i] or _queued(sock):
                    cutoff = min(cutoff, watermarks[i])
        caught_up = cutoff == checked
        cutoff = max(cutoff, checked - ORDER_HOLD)
        pending = []
        for ring in rings:
            spans, _ = ring.read(0, READ_LIMIT)
            data = ring.data
            pending.append([(records.arrival(data[offset:offset + length]), (offset, length, after))
                            for offset, length, after in spans])
        order = []
        release: dict[int, int] = {}
        taken = [0] * len(rings)
        for index, (offset, length, after) in in_arrival_order(pending, cutoff):
            order.append((rings[index], offset, length))
            release[index] = after
            taken[index] += 1
        left = [ring[count][0] for ring, count in zip(pending, taken) if count < len(ring)]
        self._held = min(left) if left and not caught_up else None
        return order, release

    def _round(self, now: float) -> bool:
        backbone = self.backbone
        order, release = self._take()
        for ring, offset, length in order:
            kind, source, body = records.unpack_ingress(ring.data[offset:offset + length])
            if kind == records.PUSH_RECORD:  # the body's type goes with the kind
                backbone.push(cast(memoryview, body), source, now)
            elif kind == records.KEEPALIVE_RECORD:
                backbone.keepalive(cast(KeepaliveIn, body), source, now)
            else:
                backbone.request(cast(RequestIn, body), now)
        clients = self._client_changes(now)
        out = backbone.flush_control(now)
        if out.reserve is not None:
            self.reservations.submit(out.reserve)
        self.reservations.cover(backbone.sequence.last_issued)  # before a record or CONFIRM shows a number
        log = backbone.take_log()
        if clients is not None or log:
            self.state.last_issued = backbone.sequence.last_issued  # before any of these numbers is visible
            if clients is not None:
                self._append_record(records.CLIENTS, 0, clients)
            for entry in log:
                self._append_record(entry.count, entry.step, entry.view)
            self.log.publish()
            for bell in self.fanout_bells:
                bell.ring()
        for index, position in release.items():
            self.rings[index].release(0, position)
        self.counter_block.store(backbone.counters)
        if out.sends:
            send_all(self.sock, out.sends, backbone.counters)
            self.counter_block.store(backbone.counters)
        backbone.keep_recent()  # after the fan-out workers were rung and the answers sent
        return bool(order)

    def _append_record(self, count: int, step: int, body: bytes | memoryview) -> None:
        """Copy one record into the shared log, waiting for the fan-out workers while it is full."""
        size = records.LOG_HEADER_SIZE + len(body)
        slot = self.log.reserve(size)
        while slot is None:
            # Publish what is written so far and let the fan-out workers make room.
            self.log.publish()
            for bell in self.fanout_bells:
                bell.ring()
            time.sleep(LOG_FULL_WAIT)
            slot = self.log.reserve(size)
        records.pack_log_header(slot, count, step)
        slot[records.LOG_HEADER_SIZE:] = body

    def _client_changes(self, now: float) -> bytes | None:
        """The packed client table when it changed (expiry included) since the last round, else None.

        It goes into the log ahead of this round's messages, exactly like the
        single-process core, which sends a flush's messages to the subscribers
        of that flush.  The shared table keeps a copy for restarted workers.
        """
        clients = self.backbone.clients
        plain, batch = clients.subscribers(now)
        journalers = clients.journalers(now)
        views = self._views
        packed = None
        if views is None or views[0] is not plain or views[1] is not batch or views[2] is not journalers:
            self._views = (plain, batch, journalers)
            rows = {}
            for addr in (*plain, *batch, *journalers):
                entry = clients.get(addr)
                if entry is not None:
                    rows[addr] = entry.flags
            packed = records.pack_clients(rows.items())
            self.table.publish(packed)
        if packed is not None or now - self._gauges_at >= 1.0:
            self.state.store_gauges(clients.counts(now))
            self._gauges_at = now
        return packed
