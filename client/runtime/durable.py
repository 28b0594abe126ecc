"""File operations whose effect survives a crash, and the lock that gives a directory one owner.

The backbone's sequence file, the journal's segment summaries and Parquet
files, the users database and the load test's results are all replaced the
same way (a temporary file in the same directory, fsync, rename, fsync of the
directory), so a crash at any moment leaves either the old or the new content; the backbone's state directory and
the journal's directory are each locked the same way.
"""
from __future__ import annotations

import fcntl
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

from fyrehose.errors import CommandFailed

TEMPORARY_SUFFIX = ".tmp"  # left behind only by a replacement cut short; its target is intact
IOV_MAX = os.sysconf("SC_IOV_MAX") if "SC_IOV_MAX" in os.sysconf_names else 16


def fsync_directory(directory: Path) -> None:
    """Make a file's creation, rename or removal in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_all(fd: int, parts: Sequence[bytes]) -> None:
    """Write every byte of ``parts`` in order, handing them to ``writev`` as they are, never joined into one copy."""
    views = [memoryview(part) for part in parts if part]
    start = 0
    while start < len(views):
        written = os.writev(fd, views[start:start + IOV_MAX])
        while start < len(views) and written >= len(views[start]):
            written -= len(views[start])
            start += 1
        if written:
            views[start] = views[start][written:]


def replace_atomically(path: Path, content: bytes, mode: int = 0o644) -> None:
    """Write ``content`` so that ``path`` holds either its old content or all of the new, never a mix.

    The new file gets permissions ``mode`` before it holds any data (0o600
    for secrets).  Concurrent writers each use their own temporary file, so
    the last rename wins whole.
    """
    path = Path(path)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=TEMPORARY_SUFFIX)
    try:
        try:
            os.fchmod(fd, mode)
            write_all(fd, [content])
        finally:
            os.close(fd)
        move_into_place(Path(temporary), path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def move_into_place(temporary: Path, path: Path) -> None:
    """Make the complete file ``temporary`` the content of ``path``, durably: fsync it, rename it, fsync the directory.

    For files another library writes (Parquet through pyarrow): write them
    whole under a temporary name in ``path``'s directory, then call this.
    After a crash ``path`` is either as it was or the whole new file.
    """
    fd = os.open(temporary, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temporary, path)
    fsync_directory(Path(path).parent)


def remove_leftovers(path: Path) -> None:
    """Delete the temporary files of replacements of ``path`` that a crash cut short (call it under the lock)."""
    for leftover in Path(path).parent.glob(f".{Path(path).name}.*{TEMPORARY_SUFFIX}"):
        leftover.unlink(missing_ok=True)


class DirectoryInUse(CommandFailed):
    """Another process holds the directory's lock."""


class DirectoryLock:
    """An exclusive ``flock`` on ``DIR/lock``: one process owns the directory until it closes or dies.

    The kernel releases the lock when the holder exits, however it exits, so
    a crash never leaves a stale lock; the file holds the holder's PID for
    whoever wonders who it is.
    """

    def __init__(self, directory: Path, name: str = "lock") -> None:
        self.path = Path(directory) / name
        self._fd: int | None = None

    def acquire(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise DirectoryInUse(f"{self.path.parent} is locked by another process") from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
