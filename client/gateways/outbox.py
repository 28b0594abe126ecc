"""What a gateway connection has to say to its client, in the order the client must hear it.

A client's replies come in the order of its requests, but some of them are
known only later: a Redis ``PUBLISH`` reply once the backbone confirmed the
message, a ``GET`` once the cache answered.  A pure connection therefore
*holds* a slot for such a reply and fills it when the driver feeds the
result back; everything replied after the slot waits behind it, and is
released, in order, the moment the slots before it are filled.  Pub/sub
messages from the stream are *pushes*: they are written as soon as
possible, never behind a reply (as Redis and nats-server write them).

Pure: bytes in, bytes out.  The driver takes what is ready with
:meth:`Outbox.take` and writes it.  When the outbox turns from empty to
ready while its driver is not feeding it (a message of the stream, routed to
many connections at once), it appends its ``owner`` to the list
``became_ready`` (when given): the router then writes those connections,
and only those, once it has routed what it was given.  Nothing here calls
back into the driver.  A
``framing`` turns each reply and push into what travels (RESP values into
WebSocket messages, :mod:`fyrehose.gateways.http.websocket`).
"""
from __future__ import annotations

from collections import deque
from typing import Protocol


class Framing(Protocol):
    """How replies, pushes and the closing look on the wire (nothing to do for a plain TCP stream)."""

    def reply(self, data: bytes) -> bytes:
        """One or more whole replies, framed."""

    def push(self, data: bytes) -> bytes:
        """One pushed message, framed."""

    def close(self, reason: str) -> bytes:
        """The last words of an orderly close (a WebSocket close frame), or nothing."""


class Slot:
    """A reply that will be known later; filled once."""

    __slots__ = ("data", "filled", "close")

    def __init__(self) -> None:
        self.data = b""
        self.filled = False
        self.close: str | None = None  # hang up after this reply


class _Close:
    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason


class Outbox:
    """A connection's output: ready bytes, replies waiting behind unfilled slots, and the close."""

    __slots__ = ("became_ready", "owner", "held", "framing", "closing", "waiting", "_ready", "_queue")

    def __init__(self, framing: Framing | None = None) -> None:
        self.became_ready: list | None = None  # where ``owner`` goes when the outbox turns ready (not ``held``)
        self.owner: object = None
        self.held = False  # the driver is feeding the connection: it writes what is ready afterwards anyway
        self.framing = framing
        self.closing: str | None = None  # set once the close is released: hang up after what :meth:`take` gives
        self.waiting = 0  # slots not yet filled
        self._ready: list[bytes] = []
        self._queue: deque[bytes | Slot | _Close] = deque()  # behind the first unfilled slot

    def take(self) -> bytes:
        """Everything ready to write now, in order (b"" when nothing is)."""
        ready = self._ready
        if not ready:
            return b""
        self._ready = []
        return ready[0] if len(ready) == 1 else b"".join(ready)

    def reply(self, data: bytes) -> None:
        """A reply, after every reply before it."""
        if self.closing is not None or not data:
            return
        if self.framing is not None:
            data = self.framing.reply(data)
        if self._queue:
            self._queue.append(data)
        else:
            self._write(data)

    def push(self, data: bytes) -> None:
        """A message that goes out as soon as possible, ahead of replies still waiting."""
        if self.closing is not None:
            return
        if self.framing is not None:
            data = self.framing.push(data)
        self._write(data)

    def raw(self, data: bytes) -> None:
        """Bytes of the transport itself (a WebSocket pong), unframed, as soon as possible."""
        if self.closing is None and data:
            self._write(data)

    def hold(self) -> Slot:
        """A place for a reply known later, after every reply before it; :meth:`fill` it."""
        slot = Slot()
        self.waiting += 1
        self._queue.append(slot)
        return slot

    def fill(self, slot: Slot, data: bytes, close: str | None = None) -> None:
        """The held reply is ``data`` (``close``: hang up after it); what it held back follows it."""
        if slot.filled:
            return
        slot.filled = True
        self.waiting -= 1
        slot.data = self.framing.reply(data) if self.framing is not None and data else data
        slot.close = close
        self._release()

    def close(self, reason: str) -> None:
        """Hang up once every reply before this is written."""
        if self.closing is not None:
            return
        if self._queue:
            self._queue.append(_Close(reason))
        else:
            self._closed(reason)

    def close_now(self, reason: str, farewell: bytes = b"") -> None:
        """Hang up after what is ready and ``farewell``: replies still waiting are dropped."""
        if self.closing is not None:
            return
        self._queue.clear()
        if farewell:
            self._ready.append(farewell)
        self._closed(reason)

    def _release(self) -> None:
        queue = self._queue
        while queue:
            head = queue[0]
            if head.__class__ is Slot:
                if not head.filled:
                    return
                queue.popleft()
                if head.data:
                    self._write(head.data)
                if head.close is not None:
                    self._closed(head.close)
                    return
            elif head.__class__ is _Close:
                self._closed(head.reason)
                return
            else:
                queue.popleft()
                self._write(head)  # type: ignore[arg-type]

    def _closed(self, reason: str) -> None:
        for item in self._queue:  # what waited behind is dropped; its results, when they come, change nothing
            if item.__class__ is Slot:
                item.filled = True
        self._queue.clear()
        self.waiting = 0
        if self.framing is not None:
            last = self.framing.close(reason)
            if last:
                self._ready.append(last)
        self.closing = reason
        self._turned_ready()

    def _write(self, data: bytes) -> None:
        was_empty = not self._ready
        self._ready.append(data)
        if was_empty:
            self._turned_ready()

    def _turned_ready(self) -> None:
        if not self.held and self.became_ready is not None:
            self.became_ready.append(self.owner)
