"""The persisted sequence high-water mark, and the lock that keeps one backbone per state directory.

The file holds one number: no sequence above it has ever been issued.  While
running it is a reservation (numbers up to it may have been issued); a clean
shutdown lowers it to the exact last number issued.  Writes are atomic
(temporary file, fsync, rename, fsync of the directory), so a crash at any
moment leaves either the old or the new mark.
"""
from __future__ import annotations

import fcntl
import os
from pathlib import Path

from fyrehose.codec import MAX_SEQUENCE

FILE_NAME = "sequence"
LOCK_NAME = "lock"


class StateError(RuntimeError):
    pass


def default_state_dir(host: str, port: int) -> Path:
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "fyrehose" / f"backbone-{host}-{port}"


class SequenceStateFile:
    def __init__(self, directory: str | os.PathLike) -> None:
        self.directory = Path(directory)
        self.path = self.directory / FILE_NAME
        self._lock_fd: int | None = None

    def open(self) -> int:
        """Lock the directory and return the persisted mark (0 when there is none)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.directory / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise StateError(f"another backbone is using the state directory {self.directory}") from None
        self._lock_fd = fd
        try:
            return self.read()
        except StateError:
            self.close()
            raise

    def read(self) -> int:
        try:
            text = self.path.read_text().strip()
        except FileNotFoundError:
            return 0
        try:
            value = int(text)
        except ValueError:
            raise StateError(f"{self.path} does not hold a sequence number: {text[:40]!r}") from None
        if not 0 <= value <= MAX_SEQUENCE:
            raise StateError(f"{self.path} holds an out-of-range sequence number {value}")
        return value

    def write(self, value: int) -> None:
        tmp = self.path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, f"{value}\n".encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.path)
        dir_fd = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

    def close(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None
