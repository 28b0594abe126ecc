"""File operations whose effect survives a crash: fsync of a directory, atomic replacement of a file."""
from __future__ import annotations

import os
from pathlib import Path


def fsync_directory(directory: Path) -> None:
    """Make a file's creation, rename or removal in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def replace_atomically(path: Path, content: bytes) -> None:
    """Write ``content`` so that ``path`` holds either its old content or all of the new, never a mix."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(content)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_directory(path.parent)
