"""The persisted sequence high-water mark, and the lock that keeps one backbone per state directory.

The file holds one number: no sequence above it has ever been issued.  While
running it is a reservation (numbers up to it may have been issued); a clean
shutdown lowers it to the exact last number issued.  Writes are atomic
(temporary file, fsync, rename, fsync of the directory), so a crash at any
moment leaves either the old or the new mark.
"""
from __future__ import annotations

import os
from pathlib import Path

from fyrehose.codec import MAX_SEQUENCE
from fyrehose.durable import DirectoryInUse, DirectoryLock, remove_leftovers, replace_atomically
from fyrehose.errors import CommandFailed

FILE_NAME = "sequence"
LOCK_NAME = "lock"


class StateError(CommandFailed):
    pass


def default_state_dir(host: str, port: int) -> Path:
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "fyrehose" / f"backbone-{host}-{port}"


class SequenceStateFile:
    def __init__(self, directory: str | os.PathLike) -> None:
        self.directory = Path(directory)
        self.path = self.directory / FILE_NAME
        self._lock = DirectoryLock(self.directory, LOCK_NAME)

    def open(self) -> int:
        """Lock the directory and return the persisted mark (0 when there is none)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        try:
            self._lock.acquire()
        except DirectoryInUse:
            raise StateError(f"another backbone is using the state directory {self.directory}") from None
        remove_leftovers(self.path)
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
        replace_atomically(self.path, f"{value}\n".encode())

    def close(self) -> None:
        self._lock.release()
