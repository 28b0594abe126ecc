"""The running journal: the recording path, the FORWARD service and the maintenance thread, wired together.

:class:`~fyrehose.journal.recorder.Recorder` drains the socket (receive
thread) into a ring that its writer thread appends to the segments; the
connection's tracker REQUESTs gaps from other journals and gives up on them
after ``give_up_after`` seconds (the bounded wait).
:class:`~fyrehose.journal.forwarder.Forwarder` answers FORWARDs from the
stored datagrams, each requester paced at ``forward_rate``.  The maintenance
thread has sealed segments exported to Parquet by a worker process (the
per-message work stays off the recording path and its interpreter lock) and
applies retention.
"""
from __future__ import annotations

import queue
import socket
import sys
import threading
import time
from typing import TYPE_CHECKING, TextIO

from fyrehose.drivers.backbone_io import UNREACHABLE_AFTER
from fyrehose.errors import CommandFailed
from fyrehose.journal.export_worker import ExportWorker
from fyrehose.journal.forwarder import Forwarder
from fyrehose.journal.lag import Lag, LagWarning
from fyrehose.journal.recorder import Recorder
from fyrehose.journal.retention import Retention
from fyrehose.journal.store import JournalStore, SealedSegment
from fyrehose.protocol.codec import Address
from fyrehose.protocol.tracker import Lost
from fyrehose.runtime.fatal import guarded
from fyrehose.runtime.readiness import announce_ready

if TYPE_CHECKING:
    from fyrehose.runtime.metrics import MetricsServer  # imported when --metrics asks for it

KEEP_ALL = Retention()  # no age or size limit
RETENTION_EVERY = 30.0  # seconds between retention checks besides the one after each export


class JournalService:
    def __init__(self, store: JournalStore, backbone: Address, *, start_seq: int | None,
                 give_up_after: float = 15.0, forward_rate: float = 200_000, retention: Retention = KEEP_ALL,
                 parquet: bool = True, log: TextIO | None = None, bind: Address | None = None,
                 lag_warning: float = 1.0, metrics: Address | None = None, multicast: Address | None = None) -> None:
        self.store = store
        self.backbone = backbone
        self.start_seq = start_seq
        self.give_up_after = give_up_after
        self.forward_rate = forward_rate
        self.retention = retention
        self.parquet = parquet
        self.log = log if log is not None else sys.stderr
        self.forwarded = 0
        self.bind = bind
        self.multicast = multicast
        self.lag_warning = LagWarning(lag_warning)
        self.metrics = metrics
        self._exporter: ExportWorker | None = None  # the export worker process while recording

    def say(self, text: str) -> None:
        self.log.write(f"fyrehose journal: {text}\n")
        self.log.flush()

    def run(self, stop: threading.Event, announcement: str) -> None:
        """Journal until ``stop`` is set, then write everything already received.

        ``announcement`` is logged once the backbone answered, so that a
        backbone that cannot be reached is the only line a failed start prints.
        """
        recorder = Recorder(self.store, self.backbone, start_seq=self.start_seq, give_up_after=self.give_up_after,
                            forward_rate=self.forward_rate, bind=self.bind, on_lost=self._lost,
                            multicast=self.multicast)
        recorder.on_lag = self._lag
        sending = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)  # blocking sends, apart from the receive loop's
        sending.bind((recorder.address[0], 0))
        forwarder = Forwarder(sending, self.store.held_frames, recorder.forward_done, self.forward_rate,
                              recorder.stats, recorder.unwritten)
        recorder.on_forward = forwarder.offer
        receiving = threading.Event()  # set: the receive loop stops
        threads = [
            threading.Thread(target=guarded(lambda: recorder.receive(receiving), "journal receive"),
                             name="journal-receive", daemon=True),
            threading.Thread(target=guarded(recorder.write, "journal writer"), name="journal-writer", daemon=True),
        ]
        serving = [
            threading.Thread(target=guarded(lambda: forwarder.run(stop), "journal forwarder"),
                             name="journal-forwarder", daemon=True),
            threading.Thread(target=guarded(lambda: self._maintain(stop), "journal maintenance"),
                             name="journal-maintenance", daemon=True),
        ]
        server = None
        if self.parquet:
            self._exporter = ExportWorker()  # its process starts with the first export
        for thread in threads:
            thread.start()
        try:
            recorder.wait_until_reachable(UNREACHABLE_AFTER)
            if self.metrics is not None:
                server = self._serve_metrics(recorder, self.metrics)
            self.say(announcement)
            host, port = self.backbone
            announce_ready("journal", recorder.address, f"backbone {host}:{port}, directory {self.store.directory}")
            for thread in serving:
                thread.start()
            while not stop.wait(0.2):
                pass
        finally:
            receiving.set()
            stop.set()
            for thread in threads + serving:
                if thread.is_alive():
                    thread.join()
            if server is not None:
                server.stop()
            if self._exporter is not None:
                self._exporter.close()
                self._exporter = None
            recorder.close()
            sending.close()
            self.forwarded = recorder.stats["forwarded"]

    def _serve_metrics(self, recorder: Recorder, address: Address) -> MetricsServer:
        from fyrehose.journal.metrics import JournalMetrics
        from fyrehose.runtime.metrics import MetricsServer

        tracker = recorder.connection.tracker
        metrics = JournalMetrics(lambda: recorder.current_lag, self.store.stats, recorder.stats,
                                 self.store.fsync_times, lambda: tracker.highest if tracker is not None else 0)
        try:
            server = MetricsServer(address, metrics.collect).start()
        except OSError as exc:
            host, port = address
            raise CommandFailed(f"--metrics {host}:{port}: {exc.strerror or exc}") from None
        host, port = server.address[:2]
        self.say(f"metrics on http://{host}:{port}/metrics")
        return server

    def _lost(self, lost: list[Lost]) -> None:
        for gap in lost:
            self.say(f"lost {gap.from_seq}..{gap.to_seq}: no other client held them "
                     f"within {self.give_up_after:g} s (recorded in gaps.jsonl)")

    def _lag(self, lag: Lag) -> None:
        message = self.lag_warning.update(lag)
        if message is not None:
            self.say(message)

    def seal_and_export(self) -> None:
        """On a clean stop: seal the last segment and export what is not yet Parquet.

        A stopped journal then leaves everything it holds readable by the
        pipeline, which reads only Parquet; the next start opens a new segment.
        """
        self.store.seal_active()
        if self.parquet:
            for segment in self.store.sealed_segments():
                if not segment.summary.exported:
                    self._export(segment)

    # ------------------------------------------------------------ the maintenance thread

    def _maintain(self, stop: threading.Event) -> None:
        if self.parquet:
            for sealed in self.store.sealed_segments():
                if not sealed.summary.exported and not stop.is_set():
                    self._export(sealed)
        next_retention = 0.0
        while not stop.is_set():
            try:
                segment = self.store.sealed_queue.get(timeout=0.5)
            except queue.Empty:
                segment = None
            if segment is not None and self.parquet:
                self._export(segment)
            now = time.monotonic()
            if segment is not None or now >= next_retention:
                next_retention = now + RETENTION_EVERY
                self._retain()

    def _export(self, segment: SealedSegment) -> None:
        """Write a sealed segment's Parquet files; while the journal records, in the export worker process."""
        from fyrehose.journal.parquet import export_segment

        arguments = (str(segment.path), segment.summary.size, str(self.store.parquet_dir))
        try:
            if self._exporter is not None:
                self._exporter.export(*arguments)
            else:
                export_segment(*arguments)
            self.store.mark_exported(segment)
        except Exception as exc:  # the segment stays unexported (and so is kept); retried on the next start
            self.say(f"Parquet export of {segment.path.name} failed: {exc}")

    def _retain(self) -> None:
        if self.retention.max_age is None and self.retention.max_bytes is None:
            return
        try:
            removed = self.store.apply_retention(self.retention, require_export=self.parquet)
        except OSError as exc:
            self.say(f"retention failed: {exc}")
            return
        if removed:
            first, last = removed[0].summary.first_seq, removed[-1].summary.last_seq
            self.say(f"retention removed {len(removed)} segment(s) holding sequences {first}..{last}")

