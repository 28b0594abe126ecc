"""The single-process backbone driver (``--workers 0``): one socket, one loop, the pure core.

The loop drains every datagram the kernel holds before flushing, so under load
BATCH subscribers get full datagrams while an idle backbone answers at once.
"""
from __future__ import annotations

import math
import os
import select
import signal
import sys
import time
from dataclasses import dataclass

import psutil

from fyrehose.backbone.core import Backbone
from fyrehose.backbone.host.multicast import GroupOptions, enable_group_sends
from fyrehose.backbone.host.statefile import ReservationWriter, SequenceStateFile
from fyrehose.backbone.host.stopping import StopRequest
from fyrehose.backbone.host.udp import SOCKET_BUFFER, bind_udp, send_all
from fyrehose.backbone.pair.member import Role
from fyrehose.backbone.single.pair_member import PairDriver
from fyrehose.backbone.single.trace import StageTrace
from fyrehose.protocol.codec import Address
from fyrehose.runtime.metrics import (
    Metric,
    MetricsServer,
    client_metrics,
    counter_metrics,
    pair_metrics,
    process_metrics,
)
from fyrehose.runtime.readiness import announce_ready

RECV_SIZE = 65536
DRAIN_LIMIT = 512
DRAIN_BYTES = 1 << 20  # flush after this much input too: 512 packed datagrams would be ~460,000 messages
IDLE_POLL_MS = 500


@dataclass(frozen=True)
class PairOptions:
    """``--pair``, ``--peer``, ``--standby-sync``, ``--standby-timeout`` (docs/operations.md, "A hot standby pair")."""

    pair: Address
    peer: Address
    sync: bool
    timeout: float
    key: bytes | None = None


class SingleProcessBackbone:
    def __init__(self, backbone: Backbone, listen: Address, state: SequenceStateFile,
                 metrics: Address | None = None, socket_buffer: int = SOCKET_BUFFER,
                 group: GroupOptions | None = None, trace: StageTrace | None = None,
                 pair: PairOptions | None = None) -> None:
        self.backbone = backbone
        self.trace = trace
        self.state = state
        self.reservations = ReservationWriter(state, backbone.sequence.reserved)
        self.sock = bind_udp(listen, buffer_size=socket_buffer, freebind=pair is not None)
        self.pair: PairDriver | None = None
        try:
            if group is not None:
                enable_group_sends(self.sock, group)  # the core's DELIVERs to the group go out of this socket
            if pair is not None:
                self.pair = PairDriver(backbone, self.reservations, state.directory, self.sock, pair.pair, pair.peer,
                                       sync=pair.sync, timeout=pair.timeout, key=pair.key)
        except BaseException:
            self.sock.close()
            self.reservations.close()
            raise
        self.address = self.sock.getsockname()
        self._stop = StopRequest()
        self._wake = StopRequest()  # a role asked for by signal
        self._metrics = MetricsServer(metrics, self._collect) if metrics else None
        self._process = psutil.Process()

    def _collect(self) -> list[Metric]:
        backbone = self.backbone
        now = time.monotonic()
        return (
            counter_metrics(dict(backbone.counters))
            + client_metrics(backbone.clients.counts(now), backbone.sequence.last_issued)
            + process_metrics({"backbone": self._process})
            + (pair_metrics(self.pair.metrics(now)) if self.pair is not None else [])
        )

    def request_role(self, role: Role) -> None:
        """Promote (PRIMARY) or demote (STANDBY) a pair member; safe from a signal handler."""
        if self.pair is not None:
            self.pair.requested = role
            self._wake.request()

    def stop(self) -> None:
        """Ask the loop to drain and return; safe from a signal handler or another thread."""
        self._stop.request()

    def run(self) -> None:
        backbone = self.backbone
        sock = self.sock
        recvfrom = sock.recvfrom
        receive = backbone.receive
        counters = backbone.counters
        pair = self.pair
        poller = select.poll()
        if pair is None:
            poller.register(sock, select.POLLIN)
        else:
            poller.register(pair.sock, select.POLLIN)
            poller.register(self._wake.fileno(), select.POLLIN)
        poller.register(self._stop.fileno(), select.POLLIN)
        if self._metrics:
            self._metrics.start()
        client_fd = sock.fileno()
        try:
            while not self._stop.requested:
                ready = poller.poll(self._wait_ms())
                now = time.monotonic()
                if pair is not None:
                    was_primary = pair.primary
                    pair.receive(now)  # what the peer said meanwhile first: a signal is applied knowing it
                    if pair.requested is not None:
                        self._wake.clear_wakeups()
                        pair.apply_requested(now)
                    if pair.primary != was_primary:  # a standby leaves client datagrams to the kernel
                        if pair.primary:
                            poller.register(sock, select.POLLIN)
                        else:
                            poller.unregister(sock)
                    if not pair.primary:
                        pair.handle_timers(now)
                        continue
                drained = 0
                trace = self.trace
                if trace is not None:
                    trace.woke()
                # woken by the pair socket or a timer alone (a standby's ACK, a heartbeat): no read that fails
                drain = DRAIN_LIMIT if any(fd == client_fd for fd, _ in ready) else 0
                for taken in range(drain):
                    try:
                        data, source = recvfrom(RECV_SIZE)
                    except BlockingIOError:
                        break
                    except OSError:
                        counters["drop:receive error"] += 1
                        continue
                    if trace is None:
                        receive(data, source, now)
                    else:
                        record = trace.received(data)
                        receive(data, source, now)
                        if record is not None:
                            trace.sequenced(record)
                    drained += len(data)
                    if drained >= DRAIN_BYTES:
                        break
                    if not taken and not poller.poll(0):  # a datagram alone (an idle backbone): answer it now,
                        break  # without the failing read that ends a drain (0.9 us against 2.8 here)
                if backbone.pending():
                    self._flush(now)
                if pair is not None:
                    pair.handle_timers(now)
            if pair is None or pair.primary:
                self._flush(time.monotonic())
        finally:
            self.reservations.close()
            if pair is None:  # a pair member keeps its grant: the peer may have issued numbers up to it
                self.state.write(backbone.sequence.last_issued)
            self._close()

    def _wait_ms(self) -> int:
        """How long the loop may sleep: until paced re-deliveries may go on, at most IDLE_POLL_MS."""
        now = time.monotonic()
        due = self.backbone.next_deadline(now)
        if self.pair is not None:
            due = self.pair.next_deadline() if due is None else min(due, self.pair.next_deadline())
        return IDLE_POLL_MS if due is None else min(IDLE_POLL_MS, max(0, math.ceil((due - now) * 1000)))

    def _flush(self, now: float) -> None:
        out = self.backbone.flush(now)
        if out.reserve is not None:
            self.reservations.submit(out.reserve)
        self.reservations.cover(self.backbone.sequence.last_issued)
        if self.trace is not None:
            self.trace.flushed()
        if self.pair is not None:
            self.pair.replicate_and_send(out, now)
        else:
            send_all(self.sock, out.sends, self.backbone.counters)
        if self.trace is not None:
            self.trace.sent()
        self.backbone.keep_recent()

    def _close(self) -> None:
        if self._metrics:
            self._metrics.stop()
        self.sock.close()
        if self.pair is not None:
            self.pair.close()
        self._stop.close()
        self._wake.close()
        self.state.close()
        if self.trace is not None:
            self.trace.close()


def run_single(backbone: Backbone, listen: Address, state: SequenceStateFile, metrics: Address | None,
               socket_buffer: int = SOCKET_BUFFER, group: GroupOptions | None = None,
               trace: StageTrace | None = None, pair: PairOptions | None = None) -> int:
    driver = SingleProcessBackbone(backbone, listen, state, metrics, socket_buffer, group, trace, pair)
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: driver.stop())
    role = ""
    if pair is not None:
        signal.signal(signal.SIGUSR1, lambda *_: driver.request_role(Role.PRIMARY))
        signal.signal(signal.SIGUSR2, lambda *_: driver.request_role(Role.STANDBY))
        role = f", standby of {pair.peer[0]}:{pair.peer[1]} (pair address {pair.pair[0]}:{pair.pair[1]})"
    announce_ready("backbone", driver.address, f"single process, pid {os.getpid()}, "
                   f"next sequence {backbone.sequence.next}, state {state.directory}{role}")
    driver.run()
    print(f"fyrehose backbone stopped at sequence {backbone.sequence.last_issued}", file=sys.stderr, flush=True)
    return 0
