"""The journal's recording path: a receive loop that drains the socket into a ring, and a writer that empties it.

The receive loop does per-datagram work only.  A BATCH datagram from the
backbone that continues the stream (the usual case) is checked with a few
strided comparisons and handed on whole, as a
:class:`~fyrehose.protocol.frame_run.FrameRun` (``DeliverForm.UNIFORM_RUNS`` with
``buffer_runs``); only while a hole is open, or for datagrams of mixed frame sizes,
does the connection's tracker order messages one by one.  The writer thread
takes everything waiting in the ring at once and appends it to the segment
in one write (one fsync per batch with ``--fsync always``), so the busier the
stream, the larger the writes.  The ring is bounded in bytes: when the
writer falls that far behind, the receive loop waits for it and the kernel's
socket buffer holds what arrives meanwhile.
"""
from __future__ import annotations

import threading
import time
from collections import Counter, deque
from collections.abc import Callable

from fyrehose.drivers.backbone_io import THREADS, await_ack, open_socket, say_goodbye
from fyrehose.drivers.receive_loop import ReceiveLoop
from fyrehose.journal.lag import Lag, LagClock
from fyrehose.journal.store import JournalStore
from fyrehose.net.group_socket import join_group
from fyrehose.protocol import codec
from fyrehose.protocol.codec import Address
from fyrehose.protocol.connection import BackboneConnection, ConnectionOptions, DeliverForm, Incoming
from fyrehose.protocol.frame_run import FrameRun
from fyrehose.protocol.tracker import Event, Lost, TrackerOptions
from fyrehose.subjects.client_core import ClientCore

RECEIVE_BUFFER = 64 << 20  # what arrives while the writer catches up waits here
RING_BYTES = 256 << 20
MAX_BUFFERED = 4_000_000  # messages waiting behind a hole (mostly as whole datagrams) before it is given up  # datagrams received and not yet written, at most
RECEIVE_TIMEOUT = 0.02  # the receive loop's longest wait: it notices being stopped this soon
WRITER_IDLE = 0.005
GROUP_ROUND = 64  # datagrams read from each socket (unicast, the group's) before the other gets its turn again
Item = FrameRun | list[Event]


class Recorder:
    """``on_gaps(lost)`` is called by the writer thread with what it recorded as lost."""

    def __init__(self, store: JournalStore, backbone: Address, *, start_seq: int | None, give_up_after: float,
                 forward_rate: float, bind: Address | None = None, ring_bytes: int = RING_BYTES,
                 on_lost: Callable[[list[Lost]], None] | None = None, multicast: Address | None = None) -> None:
        self.store = store
        self.backbone = backbone
        self.stats: Counter[str] = Counter()
        options = ConnectionOptions(
            flags=codec.FLAG_HEAD | codec.FLAG_BATCH, delivers=DeliverForm.UNIFORM_RUNS, buffer_runs=True,
            tracker=TrackerOptions(give_up_after=give_up_after, forward_rate=forward_rate, max_buffered=MAX_BUFFERED),
            multicast=multicast is not None)
        self.connection = BackboneConnection(backbone, options, stats=self.stats)
        self.connection.track(start_seq)
        self.sock = open_socket(backbone, bind=bind, receive_buffer=RECEIVE_BUFFER)
        self.sock.settimeout(RECEIVE_TIMEOUT)
        self.address: Address = self.sock.getsockname()
        self.group = multicast
        self.core = ClientCore(self.connection)
        self._loop = ReceiveLoop(
            self.sock, next_deadline=self.core.next_deadline, handle_timers=self._handle_timers,
            datagram=self._datagram, stats=self.stats, backbone=backbone,
            group=join_group(multicast, backbone, RECEIVE_BUFFER) if multicast is not None else None,
            group_address=multicast, limit=GROUP_ROUND, longest=RECEIVE_TIMEOUT)
        self._stop = threading.Event()  # the receive loop's, once it runs
        self.ring: deque[tuple[Item, int]] = deque()  # (item, its bytes)
        self.ring_bytes = ring_bytes
        self.lag_clock = LagClock()  # the writer thread's
        self.current_lag = Lag(0, 0.0)  # updated by the writer thread after every batch
        self.on_forward: Callable[[codec.Forward], None] | None = None
        self.on_lost = on_lost
        self.on_lag: Callable[[Lag], None] | None = None
        self._received_bytes = 0  # written by the receive thread only
        self._taken_bytes = 0  # written by the writer thread only
        self._wake = threading.Event()
        self._acked = THREADS.event()
        self._received_done = threading.Event()

    # ------------------------------------------------------------ the receive thread

    def wait_until_reachable(self, timeout: float) -> None:
        await_ack(self._acked.wait, self.backbone, timeout)

    def receive(self, stop: threading.Event) -> None:
        """Drain the socket until ``stop``; then say goodbye so the backbone stops sending at once."""
        self._stop = stop
        try:
            self._loop.run(lambda: not stop.is_set())
        finally:
            self._loop.close()
            self._received_done.set()
            self._wake.set()
            say_goodbye(self.sock, self.connection)

    def _datagram(self, data: bytes, source: Address, now: float, from_group: bool) -> None:
        connection = self.connection
        self._take(connection.receive_group(data, source, now) if from_group else connection.receive(data, source, now),
                   len(data))

    def _take(self, incoming: Incoming, size: int) -> None:
        """Hand what one datagram brought to the writer (whole datagrams, events), the forwarder and the waiters."""
        for run in incoming.runs:
            self.ring.append((run, size))
        if incoming.events:
            self.ring.append((incoming.events, size))
        if incoming.runs or incoming.events:
            self._received_bytes += size
            self._wake.set()
            if self._received_bytes - self._taken_bytes > self.ring_bytes:
                self._wait_for_writer(self._stop)
        if incoming.forwards and self.on_forward is not None:
            for forward in incoming.forwards:
                self.on_forward(forward)
        if incoming.acked:
            self._acked.set()
        if incoming.fell_back:
            self._loop.leave_group()

    def _handle_timers(self, now: float) -> None:
        due = self.core.handle_timers(now)
        for datagram in due.datagrams:
            try:
                self.sock.sendto(datagram, self.backbone)
            except OSError:
                self.stats["send errors"] += 1
        if due.events:
            self.ring.append((due.events, 0))
            self._wake.set()

    def _wait_for_writer(self, stop: threading.Event) -> None:
        self.stats["ring full"] += 1
        while self._received_bytes - self._taken_bytes > self.ring_bytes // 2 and not stop.is_set():
            time.sleep(0.001)

    # ------------------------------------------------------------ the writer thread

    def write(self) -> None:
        """Empty the ring into the store until the receive loop has ended and everything it took is written."""
        ring, store, wake = self.ring, self.store, self._wake
        while True:
            finished = self._received_done.is_set()
            batch: list[FrameRun | Event] = []
            taken = 0
            while ring:
                item, size = ring.popleft()
                taken += size
                if type(item) is FrameRun:
                    batch.append(item)
                else:
                    batch.extend(item)  # type: ignore[arg-type]  # a list of events
            if batch:
                self._write(batch)
                self._taken_bytes += taken
            elif finished:
                return
            else:
                wake.wait(WRITER_IDLE)
                wake.clear()
            now = time.monotonic()
            store.handle_timers(now)
            self._measure_lag(now)

    def _write(self, batch: list[FrameRun | Event]) -> None:
        gaps = self.store.write(batch)
        if gaps and self.on_lost is not None:
            self.on_lost([Lost(gap.from_seq, gap.to_seq, "not recovered") for gap in gaps])

    # ------------------------------------------------------------ what the metrics show

    def _measure_lag(self, now: float) -> None:
        tracker = self.connection.tracker
        if tracker is not None:  # the highest sequence known to exist: from DELIVERs and the ACKs' HEAD
            self.lag_clock.saw_head(tracker.highest, now)
        self.current_lag = self.lag_clock.lag(self.store.written_through, now)
        if self.on_lag is not None:
            self.on_lag(self.current_lag)

    def unwritten(self, seq: int) -> bool:
        """Whether ``seq`` is known to exist (received, or below the backbone's HEAD) but not yet written or lost."""
        tracker = self.connection.tracker
        return tracker is not None and self.store.written_through < seq <= tracker.highest

    def forward_done(self, forward: codec.Forward) -> None:
        self.connection.forward_done(forward)

    def close(self) -> None:
        self.sock.close()
