"""One subscriber's queue between the receive thread that fills it and the reader that drains it.

Kept apart from the client so that routing can be exercised without sockets.
"""
from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from itertools import repeat

from fyrehose.errors import MessagesLost
from fyrehose.protocol import codec
from fyrehose.protocol.frame_run import FrameRun
from fyrehose.protocol.tracker import Event, Lost, Message
from fyrehose.subjects.subscription_events import InitialGate, SubjectMessage

_CLOSED = object()


class Subscription:
    """The ordered stream of one :meth:`Client.subscribe` call; iterate it or call :meth:`get`.

    With ``on_loss="raise"`` (default) a permanent loss raises
    :class:`MessagesLost` from ``__next__``/``get`` and the stream goes on after
    it; with ``on_loss="yield"`` a :class:`Lost` event is returned in line.
    At most ``max_queued`` events (and ``max_queued_bytes`` of payload) wait for
    the reader; beyond that the surplus becomes a ``Lost`` range with reason
    "subscriber overrun".  A backbone datagram that continues the stream
    waits as it came (a :class:`~fyrehose.protocol.frame_run.FrameRun`) and becomes
    messages only when the reader reaches it: the receive thread's cost is
    then per datagram, not per message, so it drains the socket while the
    application iterates slowly, and a burst that fits the queue is never
    lost in the kernel (no REQUEST at all).

    Without a ``pattern`` it yields every message as a :class:`Message` with
    the raw payload (envelopes included, undecoded).  With one it yields a
    :class:`~fyrehose.subjects.subscription_events.SubjectMessage` for each enveloped
    message whose subject matches; loss events reach every subscription.
    """

    def __init__(self, on_loss: str = "raise", max_queued: int = 1_000_000, pattern: str | None = None,
                 max_queued_bytes: int = 256 << 20, pump: Callable[[], None] | None = None) -> None:
        """``pump`` is called as the reader reaches each datagram's messages: the client drains its socket there
        (see ``Client._pump``)."""
        if on_loss not in ("raise", "yield"):
            raise ValueError("on_loss must be 'raise' or 'yield'")
        self.on_loss = on_loss
        self.max_queued = max_queued
        self.max_queued_bytes = max_queued_bytes
        self.pattern = pattern
        self.gate: InitialGate | None = None
        self._pump = pump
        # One writer (the receive thread) appends, one reader pops: deque operations are atomic,
        # so a message costs no lock on either side; the condition only wakes a reader that waits.
        self._items: deque = deque()
        self._ready = threading.Condition(threading.Lock())  # also guards _overrun
        self._offered_bytes = 0  # payload bytes ever queued: written by the receive thread only
        self._taken_bytes = 0  # payload bytes ever taken: written by the reader only
        self._offered = 0  # events ever queued (a run's messages each): written by the receive thread only
        self._taken = 0  # events ever taken (a run's messages as the reader reaches it): the reader only
        self._expanded: deque = deque()  # the messages of the run the reader reached: the reader's own
        self._overrun: tuple[int, int] | None = None
        self.closed = False

    def __iter__(self) -> Subscription:
        return self

    def __next__(self) -> Event:
        event = self.get()
        if event is None:
            raise StopIteration
        return event

    def get(self, timeout: float | None = None) -> Event | None:
        """The next event; None when ``timeout`` passes or the client closed."""
        expanded = self._expanded
        if expanded:
            return expanded.popleft()
        if self._overrun is not None:
            lost = self._overrun_if_drained()  # never queued, so not counted as taken
            if lost is not None:
                if self.on_loss == "raise":
                    raise MessagesLost(lost)
                return lost
        try:
            item = self._items.popleft()
        except IndexError:
            item = self._wait(timeout)
            if item is None:
                return None
        if item is _CLOSED:
            self._items.append(_CLOSED)  # every later call ends too
            return None
        cls = item.__class__
        if cls is FrameRun:
            if self._pump is not None:
                self._pump()
            self._taken += item.count
            self._taken_bytes += _payload_bytes(item)
            expanded.extend(_messages(item))
            return expanded.popleft()
        self._taken += 1
        if cls is not Lost:
            self._taken_bytes += len(item.data)
        elif self.on_loss == "raise":
            raise MessagesLost(item)
        return item

    def get_many(self, limit: int, timeout: float | None = None, *, runs: bool = False) -> list[Event | FrameRun]:
        """Up to ``limit`` events in order: what is queued now, waiting up to ``timeout`` for the first (none
        when it passes or the client closed).

        For a reader that takes the stream in batches (the cache): a run's
        messages are taken together instead of one call each; with ``runs`` a
        datagram kept whole comes as its :class:`~fyrehose.protocol.frame_run.FrameRun`
        (counted as its messages, so a batch may pass ``limit`` by one run's),
        for a reader that never needs them as messages.  A loss ends a batch
        and comes first in the next one, so ``on_loss`` applies as in
        :meth:`get`.
        """
        events: list[Event | FrameRun] = []
        count = 0
        expanded, items = self._expanded, self._items
        while count < limit:
            if expanded:
                room = limit - count
                if len(expanded) <= room:
                    count += len(expanded)
                    events += expanded
                    expanded.clear()
                else:
                    count = limit
                    events += [expanded.popleft() for _ in range(room)]
                continue
            if items and runs and self._overrun is None and (run := items[0]).__class__ is FrameRun:
                items.popleft()
                if self._pump is not None:
                    self._pump()
                self._taken += run.count
                self._taken_bytes += _payload_bytes(run)
                count += run.count
                events.append(run)
                continue
            if events and (self._overrun is not None or not items or items[0].__class__ is Lost or items[0] is _CLOSED):
                break
            event = self.get(0 if events else timeout)  # the first waits; later ones are queued messages
            if event is None:
                break
            count += 1
            events.append(event)
            if event.__class__ is Lost:
                break
        return events

    @property
    def queued(self) -> int:
        """Entries waiting for the reader (a datagram's run counts once; the close marker included)."""
        return len(self._items)

    def _fits(self, count: int, size: int) -> bool:
        return self._offered - self._taken + count <= self.max_queued \
            and self._offered_bytes - self._taken_bytes + size <= self.max_queued_bytes

    def _wait(self, timeout: float | None) -> Event | object | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._ready:
            while not self._items:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return None
                self._ready.wait(remaining)
            return self._items.popleft()

    def _overrun_if_drained(self) -> Lost | None:
        """Once the reader has caught up, what it missed is reported at once, not with the next message."""
        with self._ready:
            if self._overrun is None or self._items:
                return None
            lost = Lost(self._overrun[0], self._overrun[1], "subscriber overrun")
            self._overrun = None
            return lost

    def _offer_many(self, messages: list) -> None:
        """Messages of one datagram at once: one wake-up for all of them, when they fit."""
        size = sum(len(message.data) for message in messages)
        if self._overrun is None and self._fits(len(messages), size):
            self._offered_bytes += size
            self._offered += len(messages)
            self._items.extend(messages)
            with self._ready:
                self._ready.notify()
            return
        for message in messages:
            self._offer(message)

    def _offer_run(self, run: FrameRun) -> None:
        """A datagram's messages as one entry, expanded by the reader; message by message when it does not fit."""
        size = _payload_bytes(run)
        if self._overrun is None and self._fits(run.count, size):
            self._offered_bytes += size
            self._offered += run.count
            self._items.append(run)
            with self._ready:
                self._ready.notify()
            return
        self._offer_many(_messages(run))

    def _offer(self, event: Event | SubjectMessage) -> None:
        first = event.from_seq if isinstance(event, Lost) else event.seq
        last = event.to_seq if isinstance(event, Lost) else event.seq
        size = 0 if isinstance(event, Lost) else len(event.data)
        with self._ready:
            if not self._fits(1, size):
                self._overrun = (self._overrun[0] if self._overrun else first, last)
                return
            if self._overrun:
                self._items.append(Lost(self._overrun[0], self._overrun[1], "subscriber overrun"))
                self._offered += 1
                self._overrun = None
            self._offered_bytes += size
            self._offered += 1
            self._items.append(event)
            self._ready.notify()

    def _close(self) -> None:
        self.closed = True
        self._items.append(_CLOSED)
        with self._ready:
            self._ready.notify_all()


def _payload_bytes(run: FrameRun) -> int:
    return len(run.data) - run.count * codec.FRAME_HEADER


def _messages(run: FrameRun) -> list[Message]:
    """A run's frames as the tracker's messages (named tuples built without a Python call each)."""
    return list(map(tuple.__new__, repeat(Message), run.messages()))
