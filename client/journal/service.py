"""The running journal: a :class:`fyrehose.Client` whose store is the journal directory, and its threads.

The client does the protocol work: it orders DELIVERs, REQUESTs gaps from other
journals and gives up on them after ``give_up_after`` seconds (the bounded
wait), and answers FORWARDs from :meth:`JournalStore.held` paced by its token
bucket.  This driver writes the ordered events in batches and runs a
maintenance thread that exports sealed segments to Parquet and applies
retention.
"""
from __future__ import annotations

import queue
import sys
import threading
import time
from typing import TextIO

from fyrehose.addresses import Address
from fyrehose.client import Client
from fyrehose.fatal import guarded
from fyrehose.journal.retention import Retention
from fyrehose.journal.store import JournalStore, SealedSegment
from fyrehose.readiness import announce_ready
from fyrehose.tracker import Event

BATCH = 8192  # events written (and, with fsync=always, synced) together
KEEP_ALL = Retention()  # no age or size limit
RETENTION_EVERY = 30.0  # seconds between retention checks besides the one after each export


class JournalService:
    def __init__(self, store: JournalStore, backbone: Address | str, *, start_seq: int | None,
                 give_up_after: float = 15.0, forward_rate: float = 50_000, retention: Retention = KEEP_ALL,
                 parquet: bool = True, max_queued: int = 2_000_000, log: TextIO | None = None,
                 bind: Address | None = None, multicast: Address | None = None) -> None:
        self.store = store
        self.backbone = backbone
        self.start_seq = start_seq
        self.give_up_after = give_up_after
        self.forward_rate = forward_rate
        self.retention = retention
        self.parquet = parquet
        self.max_queued = max_queued
        self.log = log if log is not None else sys.stderr
        self.forwarded = 0
        self.bind = bind
        self.multicast = multicast

    def say(self, text: str) -> None:
        self.log.write(f"fyrehose journal: {text}\n")
        self.log.flush()

    def run(self, stop: threading.Event, announcement: str) -> None:
        """Journal until ``stop`` is set, then write what was already ordered.

        ``announcement`` is logged once the backbone answered, so that a
        backbone that cannot be reached is the only line a failed start prints.
        """
        client = Client(self.backbone, store=self.store, give_up_after=self.give_up_after,
                        forward_rate=self.forward_rate, bind=self.bind, multicast=self.multicast)
        self.say(announcement)
        host, port = self.backbone
        announce_ready("journal", client.address, f"backbone {host}:{port}, directory {self.store.directory}")
        maintenance = threading.Thread(target=guarded(lambda: self._maintain(stop), "journal maintenance"),
                                       name="journal-maintenance", daemon=True)
        try:
            stream = client.subscribe(from_seq=self.start_seq, on_loss="yield", max_queued=self.max_queued)
            maintenance.start()
            while not stop.is_set():
                event = stream.get(timeout=0.2)
                if event is not None:
                    batch = [event]
                    while len(batch) < BATCH and (event := stream.get(timeout=0)) is not None:
                        batch.append(event)
                    self._write(batch)
                self.store.tick(time.monotonic())
            client.close()
            rest = []
            while (event := stream.get(timeout=0)) is not None:
                rest.append(event)
            self._write(rest)
        finally:
            client.close()
            stop.set()
            if maintenance.is_alive():
                maintenance.join()
            self.forwarded = client.stats["forwarded"]

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

    def _write(self, batch: list[Event]) -> None:
        for gap in self.store.write(batch):
            self.say(f"lost {gap.from_seq}..{gap.to_seq}: no other client held them "
                     f"within {self.give_up_after:g} s (recorded in gaps.jsonl)")

    # ------------------------------------------------------------ the maintenance thread

    def _maintain(self, stop: threading.Event) -> None:
        if self.parquet:
            for segment in self.store.sealed_segments():
                if not segment.summary.exported and not stop.is_set():
                    self._export(segment)
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
        from fyrehose.journal.parquet import export_records

        try:
            export_records(self.store.records_of(segment), self.store.parquet_dir)
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
