"""One-key commands from the terminal while ``fyrehose top`` redraws: no Enter, no echo, restored on exit."""
from __future__ import annotations

import os
import select
import sys
import termios
import time
import tty


class Keyboard:
    """Puts a terminal on stdin in cbreak mode for the ``with`` block; without a terminal no key ever comes."""

    def __init__(self) -> None:
        self._fd = sys.stdin.fileno() if sys.stdin is not None and sys.stdin.isatty() else None
        self._saved: list | None = None

    def __enter__(self) -> Keyboard:
        if self._fd is not None:
            self._saved = termios.tcgetattr(self._fd)
            tty.setcbreak(self._fd)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fd is not None and self._saved is not None:
            termios.tcsetattr(self._fd, termios.TCSADRAIN, self._saved)

    def key(self, timeout: float) -> str | None:
        """The next key pressed within ``timeout`` seconds, or None."""
        if self._fd is None:
            time.sleep(timeout)
            return None
        ready, _, _ = select.select([self._fd], [], [], timeout)
        if not ready:
            return None
        data = os.read(self._fd, 32)
        return data[:1].decode("latin-1").lower() if data else None
