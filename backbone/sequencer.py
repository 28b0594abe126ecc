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
"""
from __future__ import annotations

import socket
import time
from typing import Callable

from fyrehose.backbone import records
from fyrehose.backbone.core import Backbone
from fyrehose.backbone.rings import Doorbell, Ring
from fyrehose.backbone.shared import CounterBlock, SequencerState, SubscriberTable
from fyrehose.backbone.statefile import SequenceStateFile
from fyrehose.backbone.udp import send_all

READ_LIMIT = 1024  # records taken from one ring per round, so no receive worker starves the others
IDLE_WAIT = 0.1  # seconds; also the resolution of client expiry while idle
LOG_FULL_WAIT = 0.0005


class Sequencer:
    def __init__(self, backbone: Backbone, rings: list[Ring], log: Ring, bell: Doorbell,
                 fanout_bells: list[Doorbell], sock: socket.socket, state: SequencerState,
                 table: SubscriberTable, counter_block: CounterBlock, state_file: SequenceStateFile,
                 stopping: Callable[[], bool]) -> None:
        self.backbone = backbone
        self.rings = rings
        self.log = log
        self.bell = bell
        self.fanout_bells = fanout_bells
        self.sock = sock
        self.state = state
        self.table = table
        self.counter_block = counter_block
        self.state_file = state_file
        self.stopping = stopping
        self._views: tuple[list, list, list] | None = None
        self._gauges_at = 0.0

    @classmethod
    def restore(cls, state: SequencerState, table: SubscriberTable, counter_block: CounterBlock,
                now: float, **backbone_options) -> Backbone:
        """A Backbone that continues where the previous sequencer (if any) stopped."""
        backbone = Backbone(reserved=state.last_issued, **backbone_options)
        backbone.counters = counter_block.load()
        for addr, flags in table.snapshot()[1]:
            backbone.clients.refresh(addr, flags, now)
        return backbone

    def run(self) -> None:
        """Serve until stopped, then drain every ring before returning."""
        while True:
            busy = self._round(time.monotonic())
            if busy:
                continue
            if self.stopping():
                if not any(ring.backlog() for ring in self.rings):
                    return
                continue
            self.bell.clear()
            if any(ring.backlog() for ring in self.rings):
                continue
            self.bell.wait(IDLE_WAIT)

    def _round(self, now: float) -> bool:
        backbone = self.backbone
        taken = []
        for ring in self.rings:
            spans, position = ring.read(0, READ_LIMIT)
            if not spans:
                continue
            data = ring.data
            for offset, length in spans:
                kind, source, body = records.unpack_ingress(data[offset:offset + length])
                if kind == records.PUSH_RECORD:
                    backbone.push(body, source, now)
                elif kind == records.KEEPALIVE_RECORD:
                    backbone.keepalive(body, source, now)
                else:
                    backbone.request(body, now)
            taken.append((ring, position))
        self._publish_clients(now)
        out = backbone.flush_control(now)
        if out.reserve is not None:
            self.state_file.write(out.reserve)
        log = backbone.take_log()
        if log:
            self.state.last_issued = backbone.sequence.last_issued  # before any of these numbers is visible
            self._append(log)
            self.log.publish()
            for bell in self.fanout_bells:
                bell.ring()
        for ring, position in taken:
            ring.release(0, position)
        self.counter_block.store(backbone.counters)
        if out.sends:
            send_all(self.sock, out.sends, backbone.counters)
            self.counter_block.store(backbone.counters)
        return bool(taken)

    def _append(self, log: list) -> None:
        """Copy sequenced frames into the shared log, waiting for the fan-out workers when it is full."""
        reserve = self.log.reserve
        for entry in log:
            size = len(entry.view)
            slot = reserve(records.LOG_HEADER_SIZE + size)
            while slot is None:
                # Publish what is written so far and let the fan-out workers make room.
                self.log.publish()
                for bell in self.fanout_bells:
                    bell.ring()
                time.sleep(LOG_FULL_WAIT)
                slot = reserve(records.LOG_HEADER_SIZE + size)
            records.pack_log_header(slot, entry.count, entry.step)
            slot[records.LOG_HEADER_SIZE:] = entry.view

    def _publish_clients(self, now: float) -> None:
        """Hand the fan-out workers the client table whenever it changed (expiry included)."""
        clients = self.backbone.clients
        plain, batch = clients.subscribers(now)
        journalers = clients.journalers(now)
        views = self._views
        if views is None or views[0] is not plain or views[1] is not batch or views[2] is not journalers:
            self._views = (plain, batch, journalers)
            rows = {}
            for addr in (*plain, *batch, *journalers):
                entry = clients.get(addr)
                if entry is not None:
                    rows[addr] = entry.flags
            self.table.publish(rows.items())
            self.state.store_gauges(clients.counts(now))
            self._gauges_at = now
        elif now - self._gauges_at >= 1.0:
            self.state.store_gauges(clients.counts(now))
            self._gauges_at = now
