"""Answering FORWARDs from the journal's stored datagrams, each requester paced by its own token bucket.

A FORWARD names a requester and a range.  The answer is the stored DELIVER
datagrams of that range, cut at frame boundaries to it (so no frame outside
the range is sent), each sent as it is: no message is decoded or encoded
again.  Requesters are served in turn, each at most ``rate`` messages/s, so a
wide range for one subscriber does not hold back another's few messages, and
no requester is flooded faster than it was promised.

A FORWARD can reach the journal before the datagrams it names are on disk:
the requester noticed the hole as the journal received them, and the writer
(an fsync, a batch) may be a few milliseconds behind.  Such a FORWARD waits,
up to ``PATIENCE``, until the writer has them, instead of being answered with
nothing and leaving the requester to retry after its back-off.
"""
from __future__ import annotations

import queue
import socket
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator

from fyrehose.journal.segment import Block, cut_frames
from fyrehose.protocol import codec
from fyrehose.protocol.codec import Address
from fyrehose.protocol.pacing import TokenBucket

BURST_DATAGRAM = 1 << 10  # tokens a requester may spend at once: about one full datagram of small frames
BURST_SHARE = 20  # and at most a twentieth of a second's worth at its rate (at least MIN_BURST)
MIN_BURST = 16
IDLE_WAIT = 0.2
PATIENCE = 0.5  # how long a FORWARD waits for the writer to store what it names
WRITER_WAIT = 0.002


def burst_for(rate: float) -> int:
    """How many messages a requester may get at once: a datagram's worth, or less at a low rate."""
    return max(MIN_BURST, min(BURST_DATAGRAM, int(rate / BURST_SHARE)))


class _Requester:
    def __init__(self, rate: float, now: float) -> None:
        self.bucket = TokenBucket(rate, burst=burst_for(rate), now=now)
        self.forwards: deque[tuple[codec.Forward, float]] = deque()  # with the time each arrived
        self.current: codec.Forward | None = None
        self.datagrams: Iterator[tuple[int, int, bytes]] = iter(())
        self.next: tuple[int, int, bytes] | None = None


class Forwarder:
    """``frames(from_seq, to_seq)`` yields ``(first, last, frames)`` of what the journal holds of a range;
    ``done(forward)`` is told when a FORWARD is answered (a repeated REQUEST is served again after that);
    ``unwritten(seq)`` is true while ``seq`` is known to exist but is not yet stored (or recorded lost)."""

    def __init__(self, sock: socket.socket, frames: Callable[[int, int], Iterable[tuple[int, int, bytes]]],
                 done: Callable[[codec.Forward], None], rate: float, stats: Counter[str],
                 unwritten: Callable[[int], bool] = lambda seq: False) -> None:
        self.sock = sock
        self.frames = frames
        self.done = done
        self.unwritten = unwritten
        self.rate = rate
        self.stats = stats
        self.queue: queue.Queue[codec.Forward] = queue.Queue(maxsize=4096)
        self._requesters: dict[Address, _Requester] = {}

    def offer(self, forward: codec.Forward) -> None:
        """From the receive thread: a FORWARD to answer (dropped, counted, when too many wait)."""
        try:
            self.queue.put_nowait(forward)
        except queue.Full:
            self.stats["forwards dropped"] += 1
            self.done(forward)

    def run(self, stop: threading.Event) -> None:
        requesters = self._requesters
        while not stop.is_set():
            self._take_new(block=not requesters)
            now = time.monotonic()
            wait = IDLE_WAIT
            for target in list(requesters):
                requester = requesters[target]
                delay = self._serve(target, requester, now)
                if delay is None:
                    del requesters[target]
                else:
                    wait = min(wait, delay)
            if requesters and wait > 0:
                time.sleep(wait)

    def _take_new(self, block: bool) -> None:
        try:
            forward = self.queue.get(timeout=IDLE_WAIT) if block else self.queue.get_nowait()
        except queue.Empty:
            return
        now = time.monotonic()
        while True:
            target = (forward.addr, forward.port)
            requester = self._requesters.get(target)
            if requester is None:
                requester = self._requesters[target] = _Requester(self.rate, now)
            requester.forwards.append((forward, now))
            try:
                forward = self.queue.get_nowait()
            except queue.Empty:
                return

    def _serve(self, target: Address, requester: _Requester, now: float) -> float | None:
        """Send what ``requester``'s bucket allows now; seconds until it may send again (None: nothing left)."""
        while True:
            if requester.next is None:
                requester.next = next(requester.datagrams, None)
            if requester.next is None:
                if requester.current is not None:
                    self.done(requester.current)
                    requester.current = None
                if not requester.forwards:
                    return None
                forward, arrived = requester.forwards[0]
                if self.unwritten(forward.to_seq) and now - arrived < PATIENCE:
                    return WRITER_WAIT
                requester.forwards.popleft()
                requester.current = forward
                requester.datagrams = iter(self.frames(forward.from_seq, forward.to_seq))
                continue
            first, last, frames = requester.next
            count = min(last - first + 1, requester.bucket.burst)  # never more at once than the burst
            delay = requester.bucket.take(count, now)
            if delay > 0:
                return delay
            if count <= last - first:  # cut at a frame boundary; the rest goes when the bucket allows
                block = Block(first, last - first + 1, 0, frames)
                requester.next = (first + count, last, cut_frames(block, first + count, last))
                frames = cut_frames(block, first, first + count - 1)
            else:
                requester.next = None
            try:
                self.sock.sendto(frames, target)
                self.stats["forwarded"] += count
                self.stats["forwarded datagrams"] += 1
            except OSError:
                self.stats["send errors"] += 1
