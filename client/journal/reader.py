"""Reading segment files: a chunked scan for recovery and verification, and range reads for FORWARDs.

Thin I/O around the decoders of :mod:`fyrehose.journal.segment` (either format): files are read
in chunks growing from 64 KiB to 1 MiB (a FORWARD for one sequence, which
starts at the nearest index entry, reads only the first), and a record cut by
a chunk boundary is completed from the next chunk, so memory stays flat
however large a segment grows.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fyrehose.journal.segment import (
    FILE_HEADER,
    FORMAT_BLOCKS,
    INCOMPLETE,
    LOG_SUFFIX,
    Block,
    BlockScan,
    Record,
    Scan,
    SegmentError,
    block_records,
    cut_frames,
    decode_blocks,
    decode_records,
    parse_name,
    segment_format,
    summary_name,
)
from fyrehose.journal.summary import SegmentSummary, SummaryBuilder, decode_summary
from fyrehose.protocol.codec import encode_deliver

FIRST_CHUNK = 64 << 10  # a FORWARD of a few sequences reads little; the chunks double up to READ_CHUNK
READ_CHUNK = 1 << 20
SEGMENTS_DIR = "segments"


class FileScan:
    """Iterates ``(offset, record)`` over a segment file of either format; afterwards ``end`` and ``stop`` say
    where and why it ended, ``format`` which format the file has and ``builder`` the summary of what it read.

    ``stop`` is None when intact records run to the end (or to ``limit``);
    otherwise the records end at ``end`` because of a torn or damaged record.
    A format-2 segment is read block by block (:meth:`blocks`); iterating it
    yields each block's messages with the block's offset.  ``on_read`` is
    called with the number of bytes of each chunk read.
    """

    def __init__(self, path: Path, start: int = 0, limit: int | None = None,
                 on_read: Callable[[int], None] | None = None) -> None:
        self.path = path
        self.start = start
        self.limit = limit
        self.on_read = on_read
        self.end = start
        self.stop: str | None = None
        self.format: int | None = None
        self.builder = SummaryBuilder()

    def __iter__(self) -> Iterator[tuple[int, Record]]:
        for offset, unit in self.units():
            if isinstance(unit, Block):
                for record in block_records(unit):
                    yield offset, record
            else:
                yield offset, unit

    def blocks(self) -> Iterator[tuple[int, Block]]:
        """``(offset, block)`` of a format-2 segment; a format-1 record comes as a block of one frame."""
        for offset, unit in self.units():
            if isinstance(unit, Block):
                yield offset, unit
            else:
                yield offset, Block(unit.seq, 1, unit.received_at, encode_deliver(unit.seq, unit.data))

    def units(self) -> Iterator[tuple[int, Record | Block]]:
        """Records (format 1) or blocks (format 2) with their offsets, in file order."""
        with open(self.path, "rb", buffering=0) as file:
            head = file.read(len(FILE_HEADER))
            self.format = segment_format(head)
            if self.format is None:  # empty, or a format-2 file whose header was cut short: nothing in it
                self.end = 0
                self.stop = INCOMPLETE if head else None
                return
            self.builder = SummaryBuilder(format=self.format)
            of_blocks = self.format == FORMAT_BLOCKS
            decode: Callable[[bytes], Scan | BlockScan] = decode_blocks if of_blocks else decode_records
            # takes what decode gives: Blocks (format 2) or Records (format 1)
            add: Callable[[Any], None] = self._add_block if of_blocks else self._add_record
            if of_blocks:
                self.start = max(self.start, len(FILE_HEADER))
            file.seek(self.start)
            position = self.start  # file offset of buffer[0]
            buffer = b""
            remaining = None if self.limit is None else self.limit - self.start
            chunk_size = FIRST_CHUNK
            while True:
                want = chunk_size if remaining is None else min(chunk_size, remaining)
                chunk_size = min(chunk_size * 2, READ_CHUNK)
                chunk = file.read(want) if want > 0 else b""
                if remaining is not None:
                    remaining -= len(chunk)
                if self.on_read and chunk:
                    self.on_read(len(chunk))
                buffer = buffer + chunk if buffer else chunk
                scan = decode(buffer)
                units: Sequence[Record | Block] = scan[0]
                for offset, unit in zip(scan.offsets, units):
                    add(unit)
                    yield position + offset, unit
                self.end = position + scan.end
                if scan.stop is None and not chunk:
                    return
                if scan.stop not in (None, INCOMPLETE) or (scan.stop == INCOMPLETE and not chunk):
                    self.stop = scan.stop
                    return
                buffer = buffer[scan.end:]
                position += scan.end

    def _add_record(self, record: Record) -> None:
        summary = self.builder.summary
        if summary is None or record.seq > summary.last_seq:  # verify reports one that does not ascend
            self.builder.add(record.seq, record.received_at, len(record.data))

    def _add_block(self, block: Block) -> None:
        summary = self.builder.summary
        if summary is None or block.first > summary.last_seq:
            self.builder.add_block(block.first, block.count, block.received_at, len(block.frames))


def read_range(path: Path, from_seq: int, to_seq: int, start: int, limit: int) -> Iterator[Record]:
    """The records of ``from_seq..to_seq`` in one segment, reading from offset ``start`` up to ``limit``."""
    for _, record in FileScan(path, start, limit):
        if record.seq > to_seq:
            return
        if record.seq >= from_seq:
            yield record


def read_frames(path: Path, from_seq: int, to_seq: int, start: int, limit: int) -> Iterator[tuple[int, int, bytes]]:
    """``(first, last, frames)`` of ``from_seq..to_seq`` in one segment: its stored datagrams cut at frame
    boundaries to the range (format 1: one record per datagram)."""
    for _, block in FileScan(path, start, limit).blocks():
        if block.first > to_seq:
            return
        if block.last >= from_seq:
            frames = cut_frames(block, from_seq, to_seq)
            yield max(from_seq, block.first), min(to_seq, block.last), frames


def scan_segment(path: Path, on_read: Callable[[int], None] | None = None) -> tuple[SummaryBuilder, FileScan]:
    """Read a whole segment: the summary of its intact records, and the scan (``end``, ``stop``) that ended it."""
    scan = FileScan(path, on_read=on_read)
    for _ in scan.units():
        pass
    return scan.builder, scan


@dataclass
class SegmentFile:
    """A segment file found in a journal directory, with its summary when it has a sound one."""

    first_seq: int
    path: Path
    summary: SegmentSummary | None

    @property
    def summary_path(self) -> Path:
        return self.path.with_name(summary_name(self.first_seq))

    def current_size(self) -> int:
        """Its size now (0 once retention removed it): for progress totals, not for checks."""
        try:
            return self.path.stat().st_size
        except FileNotFoundError:
            return 0


def list_segments(directory: Path) -> tuple[list[SegmentFile], list[Path]]:
    """The segment files of a journal directory in sequence order, and summary files without a segment.

    A summary counts only when it matches its segment's name and size: a
    segment without one is unsealed (being written, or left so by a crash).
    A segment that disappears while it is listed (a running journal's
    retention removed it) is left out.
    """
    segments_dir = directory / SEGMENTS_DIR
    logs: dict[int, Path] = {}
    summaries: dict[int, Path] = {}
    try:
        entries = list(os.scandir(segments_dir))
    except FileNotFoundError:
        return [], []
    for entry in entries:
        parsed = parse_name(entry.name)
        if parsed is None:
            continue
        first_seq, suffix = parsed
        (logs if suffix == LOG_SUFFIX else summaries)[first_seq] = Path(entry.path)
    found = []
    for first_seq in sorted(logs):
        path = logs[first_seq]
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            continue
        summary = None
        if first_seq in summaries:
            try:
                summary = decode_summary(summaries[first_seq].read_bytes())
            except (SegmentError, OSError):
                summary = None
            if summary is not None and (summary.first_seq != first_seq or summary.size != size):
                summary = None
        found.append(SegmentFile(first_seq, path, summary))
    orphans = [path for first_seq, path in sorted(summaries.items()) if first_seq not in logs]
    return found, orphans
