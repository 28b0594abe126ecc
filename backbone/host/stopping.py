"""A stop asked for from a signal handler, seen at once by a loop that is blocked waiting for input.

Setting a flag alone would wait for the loop's next timeout; a byte on a
socket pair wakes its poll/select at once (the self-pipe trick), and the
flag says why it woke.
"""
from __future__ import annotations

import socket


class StopRequest:
    def __init__(self) -> None:
        self.requested = False
        self._reader, self._writer = socket.socketpair()
        self._reader.setblocking(False)
        self._writer.setblocking(False)

    def fileno(self) -> int:
        """What the loop waits on besides its own input."""
        return self._reader.fileno()

    def request(self) -> None:
        """Safe from a signal handler or another thread, and after :meth:`close` (the flag alone then)."""
        self.requested = True
        try:
            self._writer.send(b"x")
        except OSError:  # the pipe is full (a wake-up is pending anyway) or closed
            pass

    def clear_wakeups(self) -> None:
        try:
            self._reader.recv(64)
        except BlockingIOError:
            pass

    def close(self) -> None:
        self._reader.close()
        self._writer.close()
