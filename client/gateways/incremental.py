"""What the gateways' protocol parsers share: bytes arrive in any chunking, items leave as they complete.

Each TCP protocol (RESP, NATS, Marlin framing) reads one item at a time from
a buffer with a cursor; the first input that makes the stream impossible to
follow ends it with one error item, after which the parser takes nothing
more (the connection is closed, as the original servers do).  The buffering,
the cursor and that latch are here once; a subclass says how to read one item.
"""
from __future__ import annotations

from typing import Generic, TypeVar

Item = TypeVar("Item")
Fatal = TypeVar("Fatal")


class Malformed(Exception):
    """Raised by :meth:`IncrementalParser._next`: the stream cannot be followed any further."""


class IncrementalParser(Generic[Item, Fatal]):
    """Feed it bytes as they arrive; it returns every item completed so far."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._pos = 0  # where the next item starts in _buffer
        self.failed: Fatal | None = None

    @property
    def held(self) -> int:
        """Bytes of input received and not yet made into items (an incomplete one)."""
        return len(self._buffer)

    def feed(self, data: bytes) -> list[Item | Fatal]:
        if self.failed is not None:
            return []
        self._buffer += data
        out: list[Item | Fatal] = []
        try:
            while (item := self._next()) is not None:
                if item:  # an empty item: input that holds none (a blank line, ``*0``)
                    out.append(item)
        except Malformed as exc:
            self.failed = self._fatal(str(exc))
            self._buffer.clear()
            self._pos = 0
            out.append(self.failed)
            return out
        del self._buffer[:self._pos]
        self._pos = 0
        return out

    def _next(self) -> Item | None:
        """The item at the cursor, consumed; None until it has fully arrived; Malformed when it never can."""
        raise NotImplementedError

    def _fatal(self, reason: str) -> Fatal:
        """The error item that ends the stream."""
        raise NotImplementedError
