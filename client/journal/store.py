"""One journal directory: recovery after a crash, the ordered write path, and the FORWARD store.

Two threads share it.  The recording path's writer thread calls
:meth:`write` with whole datagrams and ordered events; the forwarder calls
:meth:`held_frames` to answer FORWARDs from disk (the commands and tests read
with :meth:`held`).  File writes happen outside the lock; only the
bookkeeping that tells readers what is on disk is done under it, so a reader
sees either a block's complete bytes or nothing.

Layout::

    DIR/lock                       flock: one journal per directory
    DIR/segments/seg-N.log         records from sequence N on (see segment.py)
    DIR/segments/seg-N.idx         summary of a sealed segment (see summary.py)
    DIR/gaps.jsonl                 permanent losses (see gapindex.py)
    DIR/parquet/date=…/hour=…/     Parquet copies of sealed segments (see parquet.py)
"""
from __future__ import annotations

import os
import queue
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from fyrehose.errors import CommandFailed
from fyrehose.journal.gapindex import Gap, GapIndex, utc_iso
from fyrehose.journal.reader import SEGMENTS_DIR, FileScan, list_segments, read_frames, read_range, scan_segment
from fyrehose.journal.retention import Retention, SegmentState, expired_segments
from fyrehose.journal.segment import FORMAT_BLOCKS, MAX_FRAMES, Block, Record, block_size, summary_name
from fyrehose.journal.summary import SegmentSummary, encode_summary
from fyrehose.journal.writer import ActiveSegment
from fyrehose.protocol.codec import encode_deliver
from fyrehose.protocol.frame_run import FrameRun
from fyrehose.protocol.tracker import Event, Lost, Message
from fyrehose.runtime.durable import DirectoryInUse, DirectoryLock, fsync_directory, replace_atomically

FSYNC_MODES = ("always", "interval", "never")
LOCK_NAME = "lock"
PARQUET_DIR = "parquet"


class StoreError(CommandFailed):
    """A journal directory that cannot be used: locked by another journal, or damaged beyond a torn tail."""


def now_us() -> int:
    return time.time_ns() // 1000


@dataclass
class FsyncTimes:
    """The grouped fsyncs so far: how many, their total and the longest (seconds)."""

    count: int = 0
    total: float = 0.0
    longest: float = 0.0

    def add(self, seconds: float) -> None:
        self.count += 1
        self.total += seconds
        self.longest = max(self.longest, seconds)


@dataclass
class SealedSegment:
    path: Path
    summary: SegmentSummary

    @property
    def summary_path(self) -> Path:
        return self.path.with_name(summary_name(self.summary.first_seq))


class JournalStore:
    """``fsync``: "always" syncs every written batch before the next is taken, "interval" at most every
    ``fsync_interval`` seconds, "never" leaves it to the OS (sealing and gap records are synced in every mode).
    A segment is sealed when it reaches ``segment_bytes`` or holds records older than ``segment_age`` seconds.
    """

    def __init__(self, directory: str | os.PathLike, *, fsync: str = "interval", fsync_interval: float = 1.0,
                 segment_bytes: int = 64 << 20, segment_age: float = 600.0, clock: Callable[[], int] = now_us) -> None:
        if fsync not in FSYNC_MODES:
            raise ValueError(f"fsync must be one of {', '.join(FSYNC_MODES)}")
        self.directory = Path(directory)
        self.segments_dir = self.directory / SEGMENTS_DIR
        self.parquet_dir = self.directory / PARQUET_DIR
        self.fsync = fsync
        self.fsync_interval = fsync_interval
        self.segment_bytes = segment_bytes
        self.segment_age = segment_age
        self.clock = clock
        self.stats: Counter[str] = Counter()
        self.fsync_times = FsyncTimes()
        self.gaps = GapIndex(self.directory)
        self.sealed_queue: queue.Queue[SealedSegment] = queue.Queue()
        self._lock = threading.Lock()
        self._directory_lock = DirectoryLock(self.directory, LOCK_NAME)
        self._sealed: list[SealedSegment] = []
        self._active: ActiveSegment | None = None
        self._written_through = 0  # every sequence up to this is on disk or in the gap index
        self._next: int | None = None  # the sequence the next event must carry
        self._last_sync = time.monotonic()

    # ------------------------------------------------------------ opening and closing

    def open(self) -> int | None:
        """Lock and recover the directory; the next sequence to write (None for an empty journal)."""
        self.segments_dir.mkdir(parents=True, exist_ok=True)
        try:
            self._directory_lock.acquire()
        except DirectoryInUse:
            raise StoreError(f"{self.directory} is in use by another journal") from None
        try:
            self._recover_segments()
            self.gaps.open()
        except Exception:
            self.close()
            raise
        last = self.last_seq
        self._written_through = last
        self._next = last + 1 if last else None
        return self._next

    @property
    def last_seq(self) -> int:
        """The highest sequence on disk or in the gap index (0 when there is none)."""
        active = self._active.summary if self._active else None  # never None: _active is set once it holds blocks
        records = active.last_seq if active is not None else 0
        if not records and self._sealed:
            records = self._sealed[-1].summary.last_seq
        return max(records, self.gaps.last_seq)

    def _recover_segments(self) -> None:
        for entry in os.scandir(self.segments_dir):
            if entry.name.endswith(".tmp"):
                os.unlink(entry.path)  # an atomic replacement cut short: its target is intact
        found, orphans = list_segments(self.directory)
        for path in orphans:
            os.unlink(path)
        for index, segment in enumerate(found):
            is_last = index == len(found) - 1
            if segment.summary is not None:
                self._sealed.append(SealedSegment(segment.path, segment.summary))
                continue
            builder, scan = scan_segment(segment.path)
            size = segment.path.stat().st_size
            if scan.format is not None and scan.end < size:
                with open(segment.path, "r+b") as file:
                    file.truncate(scan.end)
                    os.fsync(file.fileno())
                self.stats["truncated bytes"] += size - scan.end
            summary = builder.summary
            if summary is None:
                os.unlink(segment.path)
                segment.summary_path.unlink(missing_ok=True)
                continue
            if summary.first_seq != segment.first_seq:
                raise StoreError(f"{segment.path} starts with sequence {summary.first_seq}, not the one in its name")
            if is_last and scan.format == FORMAT_BLOCKS:
                self._active = ActiveSegment.resume(segment.path, builder)
            else:  # a format-1 segment is sealed as it is: new blocks go to a new segment
                replace_atomically(segment.summary_path, encode_summary(summary))
                self._sealed.append(SealedSegment(segment.path, summary))
        fsync_directory(self.segments_dir)
        summaries = [s.summary for s in self._sealed]
        if self._active is not None and self._active.summary is not None:  # resumed with the summary scanned above
            summaries.append(self._active.summary)
        for before, after in zip(summaries, summaries[1:]):
            if after.first_seq <= before.last_seq:
                raise StoreError(f"segments overlap: one ends at {before.last_seq}, the next starts at {after.first_seq}")

    def close(self) -> None:
        """Sync and close everything; the active segment stays unsealed and is continued on the next open."""
        if self._active is not None:
            self._active.sync()
            self._active.close()
        self.gaps.close()
        self._directory_lock.release()

    # ------------------------------------------------------------ reads for FORWARDs

    def held(self, from_seq: int, to_seq: int) -> Iterator[tuple[int, bytes]]:
        """The messages this journal has written of ``from_seq..to_seq``, ascending."""
        with self._lock:
            upto = min(to_seq, self._written_through)
            sources = self._sources(from_seq, upto)
        for path, start, size in sources:
            try:
                for record in read_range(path, from_seq, upto, start, size):
                    yield record.seq, record.data
            except OSError:  # removed by retention meanwhile: a range it no longer holds
                self.stats["forward read errors"] += 1

    def held_frames(self, from_seq: int, to_seq: int, limit: int = MAX_FRAMES) -> Iterator[tuple[int, int, bytes]]:
        """What this journal has written of ``from_seq..to_seq`` as DELIVER datagrams: ``(first, last, frames)``.

        The stored datagrams are cut at frame boundaries to the range; pieces
        that continue each other are joined up to ``limit`` bytes (format-1
        segments hold one message per record).  Nothing is decoded per message.
        """
        with self._lock:
            upto = min(to_seq, self._written_through)
            sources = self._sources(from_seq, upto)
        first = last = 0
        pieces: list[bytes] = []
        size = 0
        for path, start, end in sources:
            try:
                for low, high, frames in read_frames(path, from_seq, upto, start, end):
                    if pieces and (low != last + 1 or size + len(frames) > limit):
                        yield first, last, b"".join(pieces)
                        pieces, size = [], 0
                    if not pieces:
                        first = low
                    pieces.append(frames)
                    size += len(frames)
                    last = high
            except OSError:  # removed by retention meanwhile: a range it no longer holds
                self.stats["forward read errors"] += 1
        if pieces:
            yield first, last, b"".join(pieces)

    def _sources(self, from_seq: int, upto: int) -> list[tuple[Path, int, int]]:
        """(file, offset to start at, bytes to read up to) of the segments holding part of ``from_seq..upto``
        (call with the lock held)."""
        sources = []
        if from_seq <= upto:
            candidates: list[tuple[Path, SegmentSummary, int]] = [
                (s.path, s.summary, s.summary.size) for s in self._sealed]
            if self._active is not None and self._active.summary is not None:
                candidates.append((self._active.path, self._active.summary, self._active.size))
            for path, summary, size in candidates:
                if summary.first_seq <= upto and summary.last_seq >= from_seq:
                    sources.append((path, summary.offset_before(from_seq), size))
        return sources

    @property
    def written_through(self) -> int:
        """Every sequence up to this is on disk or in the gap index."""
        return self._written_through

    # ------------------------------------------------------------ the ordered write path

    def write(self, events: Iterable[Event | FrameRun]) -> list[Gap]:
        """Append a subscription's ordered events, or whole datagrams in order; the gaps recorded on the way.

        A :class:`~fyrehose.protocol.frame_run.FrameRun` (a DELIVER datagram that
        continued the stream) is stored as it arrived, one block; consecutive
        messages are packed into blocks.  A :class:`Lost` range goes to the gap
        index, after the blocks before it are fsynced, so no crash can leave a
        hole that neither holds.
        """
        packer = _BlockPacker(self.clock(), min(MAX_FRAMES, self.segment_bytes // 8))
        gaps: list[Gap] = []
        for event in events:
            if type(event) is FrameRun:
                self._expect(event.first)
                packer.add_run(event.first, event.count, event.data)
                self._next = event.first + event.count
                continue
            if isinstance(event, Message):
                self._expect(event.seq)
                packer.add(event.seq, encode_deliver(event.seq, event.data))
                self._next = event.seq + 1
                continue
            assert isinstance(event, Lost)
            self._expect(event.from_seq)
            gaps.append(self._record_gap(packer, event.from_seq, event.to_seq))
            self._next = event.to_seq + 1
        self._append(packer.take())
        if self.fsync == "always":
            self.sync()
        return gaps

    def _expect(self, seq: int) -> None:
        if self._next is not None and seq != self._next:
            raise RuntimeError(f"journal got sequence {seq} where {self._next} was due: the subscription broke order")

    def _append(self, blocks: list[Block]) -> None:
        """Write ``blocks`` in one write per segment, sealing segments as they fill up."""
        start = 0
        while start < len(blocks):
            active = self._active
            if active is None:
                active = ActiveSegment.create(self.segments_dir, blocks[start].first)
            end, size = start, active.size
            while end < len(blocks):
                grown = size + block_size(len(blocks[end].frames))
                if grown > self.segment_bytes and (active.summary is not None or end > start):
                    break
                size, end = grown, end + 1
            if end == start:  # not even one more block fits the active segment
                self.seal_active()
                continue
            chunk = blocks[start:end]
            active.write(chunk)
            with self._lock:
                self._active = active
                active.noted(chunk)
                self._written_through = chunk[-1].last
            written = sum(block.count for block in chunk)
            self.stats["written"] += written
            self.stats["blocks"] += len(chunk)
            if end < len(blocks) or size >= self.segment_bytes:
                self.seal_active()
            start = end

    def _record_gap(self, packer: _BlockPacker, from_seq: int, to_seq: int) -> Gap:
        self._append(packer.take())
        if self._active is not None:
            self._active.sync()
        gap = Gap(from_seq, to_seq, utc_iso(self.clock()))
        self.gaps.append(gap)
        with self._lock:
            self._written_through = to_seq
        self.stats["lost"] += gap.count
        return gap

    def sync(self) -> None:
        """The grouped fsync of the write path (timed: the metrics show its latency)."""
        if self._active is not None:
            started = time.perf_counter()
            if self._active.sync():
                took = time.perf_counter() - started
                self.fsync_times.add(took)
        self._last_sync = time.monotonic()

    def handle_timers(self, now: float) -> None:
        """Timers of the write path: the interval fsync and sealing by age."""
        active = self._active
        if active is None:
            return
        if self.fsync == "interval" and now - self._last_sync >= self.fsync_interval:
            self.sync()
        summary = active.summary
        if summary is not None and self.clock() - summary.oldest >= self.segment_age * 1e6:
            self.seal_active()

    def seal_active(self) -> SealedSegment | None:
        """Seal the active segment (its summary written, handed to ``sealed_queue``); the next record starts another."""
        active = self._active
        if active is None or active.summary is None:
            return None
        summary = active.seal()
        sealed = SealedSegment(active.path, summary)
        with self._lock:
            self._sealed.append(sealed)
            self._active = None
        self._last_sync = time.monotonic()
        self.sealed_queue.put(sealed)
        return sealed

    # ------------------------------------------------------------ Parquet and retention (maintenance thread)

    def sealed_segments(self) -> list[SealedSegment]:
        with self._lock:
            return list(self._sealed)

    def records_of(self, segment: SealedSegment, on_read: Callable[[int], None] | None = None) -> Iterator[Record]:
        for _, record in FileScan(segment.path, 0, segment.summary.size, on_read):
            yield record

    def mark_exported(self, segment: SealedSegment) -> None:
        segment.summary.exported = True
        replace_atomically(segment.summary_path, encode_summary(segment.summary))

    def apply_retention(self, retention: Retention, require_export: bool) -> list[SealedSegment]:
        """Delete the segments ``retention`` lets go (oldest first); the ones deleted."""
        with self._lock:
            states = [SegmentState(s.summary.first_seq, s.summary.size, s.summary.newest, True, s.summary.exported)
                      for s in self._sealed]
            active = self._active.summary if self._active else None
            if active is not None:
                states.append(SegmentState(active.first_seq, active.size, active.newest, False, False))
            expired = set(expired_segments(states, retention, self.clock(), require_export))
            removed = [s for s in self._sealed if s.summary.first_seq in expired]
            self._sealed = [s for s in self._sealed if s.summary.first_seq not in expired]
        for segment in removed:
            segment.path.unlink()
            segment.summary_path.unlink()
        if removed:
            fsync_directory(self.segments_dir)
            self.stats["segments removed"] += len(removed)
        return removed


class _BlockPacker:
    """Collects the blocks of one write: whole datagrams as they are, consecutive messages packed together.

    Messages are packed while they continue each other and fit ``limit`` bytes
    (at most one datagram, so every block can be sent back as a DELIVER
    datagram unchanged, and an eighth of a segment, so segments stay close to
    their size).
    """

    def __init__(self, received_at: int, limit: int) -> None:
        self.received_at = received_at
        self.limit = limit
        self.blocks: list[Block] = []
        self._frames: list[bytes] = []
        self._first = 0
        self._size = 0

    def add_run(self, first: int, count: int, frames: bytes) -> None:
        self._close()
        self.blocks.append(Block(first, count, self.received_at, frames))

    def add(self, seq: int, frame: bytes) -> None:
        if self._frames and (seq != self._first + len(self._frames) or self._size + len(frame) > self.limit):
            self._close()
        frames = self._frames
        if not frames:
            self._first = seq
        frames.append(frame)
        self._size += len(frame)

    def take(self) -> list[Block]:
        self._close()
        blocks, self.blocks = self.blocks, []
        return blocks

    def _close(self) -> None:
        if self._frames:
            self.blocks.append(Block(self._first, len(self._frames), self.received_at, b"".join(self._frames)))
            self._frames = []
            self._size = 0
