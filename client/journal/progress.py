"""A one-line progress bar for long journal runs (verify, export), drawn on stderr only when it is a terminal.

Redirected output and tests see nothing from it, so it never mixes with a
command's real output.
"""
from __future__ import annotations

import sys
import time
from typing import TextIO

WIDTH = 30
REDRAW_EVERY = 0.1  # seconds


class Progress:
    def __init__(self, total: int, label: str, stream: TextIO | None = None) -> None:
        self.total = max(total, 0)
        self.label = label
        self.done = 0
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = self.stream.isatty()
        self._drawn = 0.0

    def advance(self, amount: int) -> None:
        self.done += amount
        now = time.monotonic()
        if self.enabled and now - self._drawn >= REDRAW_EVERY:
            self._drawn = now
            self._draw()

    def _draw(self) -> None:
        fraction = min(self.done / self.total, 1.0) if self.total else 1.0
        filled = int(fraction * WIDTH)
        bar = "#" * filled + "-" * (WIDTH - filled)
        self.stream.write(f"\r{self.label} [{bar}] {fraction:6.1%} {_size(self.done)}/{_size(self.total)}")
        self.stream.flush()

    def close(self) -> None:
        if self.enabled:
            self._draw()
            self.stream.write("\n")
            self.stream.flush()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _size(amount: float) -> str:
    if amount < 1024:
        return f"{amount:.0f} B"
    for unit in ("KiB", "MiB"):
        amount /= 1024
        if amount < 1024:
            return f"{amount:.1f} {unit}"
    return f"{amount / 1024:.1f} GiB"
