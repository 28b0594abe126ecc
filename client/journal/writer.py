"""The active segment: the one file the journal appends blocks to, and its sealing.

New segments are written in format 2 (segment.py): a file header, then one
block per stored datagram.  Each batch of blocks goes to the file in one
``writev`` (or a few) on an ``O_APPEND`` descriptor (each block's frames as received, never
copied into one buffer), so everything up to the segment's size
is in the kernel and readable by the FORWARD path at once.  Durability is the
caller's choice of when to call :meth:`ActiveSegment.sync`.  Sealing fsyncs the
file and only then writes its summary (atomically): a summary always describes
records that are on disk.
"""
from __future__ import annotations

import os
from pathlib import Path

from fyrehose.journal.segment import FILE_HEADER, FORMAT_BLOCKS, Block, block_parts, log_name, summary_name
from fyrehose.journal.summary import SegmentSummary, SummaryBuilder, encode_summary
from fyrehose.runtime.durable import fsync_directory, replace_atomically, write_all


class ActiveSegment:
    def __init__(self, path: Path, fd: int, builder: SummaryBuilder) -> None:
        self.path = path
        self.builder = builder
        self._fd = fd
        self._dirty = False

    @classmethod
    def create(cls, directory: Path, first_seq: int) -> ActiveSegment:
        path = directory / log_name(first_seq)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
        os.write(fd, FILE_HEADER)
        fsync_directory(directory)
        return cls(path, fd, SummaryBuilder(format=FORMAT_BLOCKS))

    @classmethod
    def resume(cls, path: Path, builder: SummaryBuilder) -> ActiveSegment:
        """Continue a format-2 segment whose intact blocks ``builder`` has scanned (its torn tail already cut off)."""
        fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        return cls(path, fd, builder)

    @property
    def size(self) -> int:
        return self.builder.size

    @property
    def summary(self) -> SegmentSummary | None:
        return self.builder.summary

    def write(self, blocks: list[Block]) -> None:
        """Append ``blocks`` to the file in one write; the caller then calls :meth:`noted` to account for them."""
        write_all(self._fd, [part for block in blocks for part in block_parts(*block)])
        self._dirty = True

    def noted(self, blocks: list[Block]) -> None:
        """Count written blocks into the summary (separate from :meth:`write` so the caller can lock it)."""
        add = self.builder.add_block
        for first, count, received_at, frames in blocks:
            add(first, count, received_at, len(frames))

    def sync(self) -> bool:
        """fsync what was written since the last one; whether there was anything."""
        if not self._dirty:
            return False
        os.fsync(self._fd)
        self._dirty = False
        return True

    def seal(self) -> SegmentSummary:
        """Make the segment durable and read-only: fsync, then its summary beside it."""
        self._dirty = True
        self.sync()
        self.close()
        summary = self.builder.summary
        assert summary is not None  # sealed only once it holds a block (JournalStore.seal_active)
        replace_atomically(self.path.with_name(summary_name(summary.first_seq)), encode_summary(summary))
        return summary

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
