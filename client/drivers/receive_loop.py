"""The receive-and-timer loop every driver of a client's pure core runs, written once for both I/O styles.

The threaded :class:`fyrehose.Client`, the gateways' gevent
:class:`~fyrehose.drivers.link.BackboneLink`, the journal's
:class:`~fyrehose.journal.recorder.Recorder` and the load test's Locust users
all read datagrams from a UDP socket towards the backbone (and from the
backbone's multicast group while they are members), run their timers when the
core's deadline comes, and wait for the next datagram no longer than that.
:class:`ReceiveLoop` does that for the driver that configures it (its core's
``next_deadline`` and ``handle_timers``, what it does with a datagram): it reads without
waiting, up to ``limit`` datagrams per socket in a round, counts what fails as
``receive errors``, runs the timers whenever their deadline has come, and
waits in between as its :class:`~fyrehose.drivers.backbone_io.IoStyle` waits
(``select`` on a thread, gevent's hub in a greenlet), at most ``longest``
seconds so the driver's ``running()`` is asked often enough; or, in a style with an
event loop, has the loop run the same rounds in its own callbacks (:meth:`ReceiveLoop.follow`).  A round that
filled its ``limit`` reads on without waiting, after the style's pause (a
greenlet lets the others of its loop run).  The group is left, with the
fallback notice on stderr, once (:meth:`ReceiveLoop.leave_group`).

The loop reads its own non-blocking duplicate of the driver's socket, so the
driver keeps sending from its own (blocking, or with a timeout) as before.
A driver whose readers also read (the Client's ``_pump``) calls
:meth:`ReceiveLoop.pump`; ``guard`` (a lock) keeps the two from reading at once,
so datagrams stay in order.
"""
from __future__ import annotations

import contextlib
import os
import socket
import sys
import time
from collections import Counter
from collections.abc import Callable

from fyrehose.drivers.backbone_io import THREADS, IoStyle, LoopWatch, timer_wait
from fyrehose.protocol import codec
from fyrehose.protocol.codec import Address
from fyrehose.protocol.multicast import fallback_notice
from fyrehose.runtime.fatal import guarded

NEVER = float("inf")


Datagram = Callable[[bytes, Address, float, bool], None]  # (data, source, now, from_group)


class ReceiveLoop:
    """Reads ``sock`` (and ``group``, the joined multicast group's socket, if any), hands each datagram to
    ``datagram(data, source, now, from_group)`` and calls ``handle_timers(now)`` once ``next_deadline()`` has come.

    ``backbone`` and ``group_address`` name the two in the fallback notice;
    ``stats`` counts the receive errors; ``idle()`` (optional) runs each time
    every socket is empty, before the loop waits (a driver that reports in
    batches reports there).
    """

    def __init__(self, sock: socket.socket, *, next_deadline: Callable[[], float],
                 handle_timers: Callable[[float], object], datagram: Datagram, stats: Counter[str], backbone: Address,
                 group: socket.socket | None = None, group_address: Address | None = None,
                 style: IoStyle = THREADS, limit: int = 64, longest: float = 0.1,
                 guard: contextlib.AbstractContextManager[object] | None = None, idle: Callable[[], object] | None = None) -> None:
        self.next_deadline = next_deadline
        self.handle_timers = handle_timers
        self.datagram = datagram
        self.stats = stats
        self.backbone = backbone
        self.group_address = group_address
        self.style = style
        self.limit = limit
        self.longest = longest
        self.guard: contextlib.AbstractContextManager[object] = guard if guard is not None else contextlib.nullcontext()
        self.idle = idle
        self.sock = socket.socket(fileno=os.dup(sock.fileno()))  # stdlib, whatever the driver's socket is
        self.sock.setblocking(False)
        self.group = group
        if group is not None:
            group.setblocking(False)
        self.deadline = 0.0  # when the timers run next: at once, then as the core says
        self._stopping: Callable[[], bool] = lambda: False
        self._watching: LoopWatch | None = None  # the style's loop running the rounds (:meth:`follow`)
        self._ending = False  # the round ends after the datagram being handed over (:meth:`end_round`)

    def run(self, running: Callable[[], bool], until: float = NEVER) -> None:
        """Read and run the timers while ``running()`` and before ``until`` (a monotonic time)."""
        style = self.style
        self._stopping = lambda: not running()
        while running():
            if self.round():
                style.pause()
                continue
            now = time.monotonic()
            if now >= until:
                return
            self._wait(timer_wait(self.deadline, now, min(self.longest, until - now)))

    def round(self) -> bool:
        """Run the timers if they are due, read what is waiting, ask for the next deadline; whether the round
        filled its ``limit`` (more may be waiting: read on soon, without waiting), else ``idle()``."""
        with self.guard:
            now = time.monotonic()
            if now >= self.deadline:
                self.handle_timers(now)
            taken = self._read(self.limit)
            self.deadline = self.next_deadline()
        if taken >= self.limit or self._ending:
            self._ending = False
            return True
        if self.idle is not None:
            self.idle()
        return False

    def follow(self, running: Callable[[], bool], name: str) -> None:
        """Run the rounds from the style's event loop itself while ``running()``, instead of :meth:`run` in a
        greenlet of their own: a round whenever a socket turns readable and when the deadline (at the latest
        ``longest`` seconds on) comes, each in the loop's callback, so a datagram's handler (a CONFIRM's waiters
        answered) runs with no switch to a greenlet and back.  A round that dies follows the process's policy as
        a receive thread's death does (``name`` in its one line).  Returns at once; :meth:`close` stops it."""
        watch = self.style.watch
        if watch is None:
            raise ValueError(f"the {self.style.name} style has no event loop to follow")
        self._stopping = lambda: not running()

        def ready() -> None:
            if not running():
                self._stop_watch()
                return
            self.round()  # a full round reads on at the next iteration: the socket is still readable
            watching = self._watching
            if not running():
                self._stop_watch()
            elif watching is not None:
                watching.wake_in(timer_wait(self.deadline, time.monotonic(), self.longest))

        self._watching = watch([self.sock] if self.group is None else [self.sock, self.group], guarded(ready, name))
        self._watching.wake_in(0.0)  # the first round at once: the timers are due

    def _stop_watch(self) -> None:
        watching, self._watching = self._watching, None
        if watching is not None:
            watching.stop()

    def pump(self) -> None:
        """Read what is waiting, and run the timers if they are due, from another thread (``guard`` held).

        The deadline is asked again only when this read something (a hole may have opened): a pump that finds the
        socket empty, the usual case of a reader the receive thread keeps up with, costs one comparison more.
        """
        with self.guard:
            if self._read(self.limit):
                self.deadline = self.next_deadline()
            now = time.monotonic()
            if now >= self.deadline:
                self.handle_timers(now)
                self.deadline = self.next_deadline()

    def _read(self, limit: int) -> int:
        """Up to ``limit`` reads from each socket, the unicast one first, without waiting; the most datagrams any
        socket gave (failed reads do not count: a socket that keeps failing is waited for, not read in a spin)."""
        taken = self._drain(self.sock, limit, False)
        group = self.group
        if group is not None and not self._ending:
            taken = max(taken, self._drain(group, limit, True))
        return taken

    def _drain(self, sock: socket.socket, limit: int, from_group: bool) -> int:
        recvfrom, datagram = sock.recvfrom, self.datagram
        taken = 0
        for _ in range(limit):
            try:
                data, source = recvfrom(codec.MAX_DATAGRAM)
            except BlockingIOError:
                return taken
            except OSError:
                if self._stopping() or (from_group and self.group is not sock):
                    return taken
                self.stats["receive errors"] += 1  # an ICMP error, say: the next read goes on; a closed socket
                continue  # is not read again before the wait, which tells the driver
            taken += 1
            datagram(data, source, time.monotonic(), from_group)
            if self._ending or (from_group and self.group is not sock):  # the driver ended the round, or left
                return taken  # the group
        return taken

    def end_round(self) -> None:
        """End the round after the datagram being handed over, as a full round ends (the others first, then the
        next round without waiting): its handler did a long piece of work in a loop's callback, where it cannot
        pause, and the loop's other callbacks (the clients) get theirs before the next datagram is read."""
        self._ending = True

    def _wait(self, timeout: float) -> None:
        sockets = [self.sock] if self.group is None else [self.sock, self.group]
        try:
            self.style.readable(sockets, timeout)
        except (OSError, ValueError):  # closed meanwhile: the loop is stopping, or the group was left
            left = len(sockets) == 2 and self.group is not sockets[1]
            if not (left or self._stopping()):
                raise

    def leave_group(self) -> None:
        """The connection fell back to unicast: say so on stderr and close the group's socket, once."""
        group, self.group = self.group, None
        if group is not None:
            if self._watching is not None:
                self._watching.drop(group)
            if self.group_address is not None:
                print(fallback_notice(self.group_address, self.backbone), file=sys.stderr, flush=True)
            group.close()

    def close(self) -> None:
        """Close what the loop reads (its duplicate of the driver's socket, the group's), without a notice, and
        stop following."""
        self._stop_watch()
        group, self.group = self.group, None
        if group is not None:
            group.close()
        self.sock.close()
