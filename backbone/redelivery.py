"""Last-resort re-delivery: REQUESTed ranges re-sent from the backbone's recent log, paced per requester.

A subscriber whose socket overflowed misses whole datagrams, and the
backbone still holds them as it sequenced them (:class:`RecentLog`).  Sending
them again whole costs one send per datagram, as the first time, where
rebuilding them message by message cost a Python loop per message and capped
recovery far below the stream's own rate.  A BATCH requester gets each held
datagram exactly as it was sequenced (frames of it outside the range are
duplicates it discards); a plain one gets the range's frames one per datagram,
as it got them the first time.

The limit is the requester's socket buffer, so the pacing is per requester,
in datagrams and in bytes per second: whatever the size of its datagrams, a
requester is never sent more than its buffer can be expected to drain.  A
datagram may go while both budgets are positive and takes its size from the
byte budget even below zero, so one datagram of any size passes and the
long-run byte rate still holds.  A global cap per call keeps a REQUEST storm
from many requesters from starving sequencing.

Pure: requests, the log and time in, datagrams out.
"""
from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable

from fyrehose.backbone.recent_log import RecentLog
from fyrehose.protocol import codec
from fyrehose.protocol.codec import Address

DATAGRAM_RATE = 20_000.0  # datagrams/s to one requester
BYTE_RATE = 200e6  # bytes/s to one requester: about 2.7 million 64-byte messages/s in full datagrams
DATAGRAM_BURST = 32
BYTE_BURST = 2 << 20  # a quarter of a client's 8 MiB receive buffer
MAX_JOBS = 4096  # ranges waiting, all requesters together
MAX_PER_CALL = 256  # datagrams per call, all requesters together
PACERS_KEPT = 4096  # requesters whose budgets are remembered after their last range went


class Pacer:
    """One requester's budgets of datagrams and bytes; pure: the caller supplies the clock."""

    __slots__ = ("datagram_rate", "byte_rate", "datagram_burst", "byte_burst", "datagrams", "bytes", "_stamp")

    def __init__(self, now: float, datagram_rate: float = DATAGRAM_RATE, byte_rate: float = BYTE_RATE,
                 datagram_burst: int = DATAGRAM_BURST, byte_burst: int = BYTE_BURST) -> None:
        if datagram_rate <= 0 or byte_rate <= 0 or datagram_burst < 1 or byte_burst < 1:
            raise ValueError("rates must be positive and bursts at least 1")
        self.datagram_rate = datagram_rate
        self.byte_rate = byte_rate
        self.datagram_burst = datagram_burst
        self.byte_burst = byte_burst
        self.datagrams = float(datagram_burst)
        self.bytes = float(byte_burst)
        self._stamp = now

    def _refill(self, now: float) -> None:
        elapsed = max(0.0, now - self._stamp)
        self._stamp = max(self._stamp, now)
        self.datagrams = min(self.datagram_burst, self.datagrams + elapsed * self.datagram_rate)
        self.bytes = min(self.byte_burst, self.bytes + elapsed * self.byte_rate)

    def ready(self, now: float) -> bool:
        self._refill(now)
        return self.datagrams > 1 - 1e-9 and self.bytes > 0  # (the slack absorbs the rounding of wait())

    def take(self, size: int) -> None:
        self.datagrams -= 1
        self.bytes -= size

    def wait(self, now: float) -> float:
        """Seconds from ``now`` until :meth:`ready`."""
        self._refill(now)
        return max(0.0, (1 - self.datagrams) / self.datagram_rate, (1 - self.bytes) / self.byte_rate)


class Redeliveries:
    """The ranges waiting for re-delivery, by requester, and each requester's pacing.

    ``pacing`` holds :class:`Pacer`'s keyword arguments for every requester.
    """

    def __init__(self, max_jobs: int = MAX_JOBS, max_per_call: int = MAX_PER_CALL, **pacing: float) -> None:
        self.max_jobs = max_jobs
        self.max_per_call = max_per_call
        self._pacing = pacing
        self._jobs: OrderedDict[Address, deque[list[int]]] = OrderedDict()  # requester -> [next, last] ranges
        self._pacers: OrderedDict[Address, Pacer] = OrderedDict()
        self._count = 0
        self.frames = 0  # DELIVER frames handed out, ever

    def __len__(self) -> int:
        return self._count

    def add(self, requester: Address, from_seq: int, to_seq: int, now: float) -> bool:
        """Queue ``from_seq..to_seq`` for ``requester``; False when the queue is full.

        A range already queued for the requester in full (a client asking
        again while the answer streams) is not queued twice.
        """
        jobs = self._jobs.get(requester)
        if jobs is not None and any(job[0] <= from_seq and to_seq <= job[1] for job in jobs):
            return True
        if self._count >= self.max_jobs:
            return False
        if jobs is None:
            jobs = self._jobs[requester] = deque()
        jobs.append([from_seq, to_seq])
        self._count += 1
        if requester not in self._pacers:
            self._pacers[requester] = Pacer(now, **self._pacing)  # type: ignore[arg-type]  # rates and bursts
            if len(self._pacers) > PACERS_KEPT:
                self._forget_idle_pacer()
        return True

    def _forget_idle_pacer(self) -> None:
        for addr in self._pacers:
            if addr not in self._jobs:
                del self._pacers[addr]
                return

    def take(self, now: float, recent: RecentLog, batches: Callable[[Address], bool | None],
             batch_bytes: int = codec.MAX_DATAGRAM) -> list[tuple[bytes, Address]]:
        """The datagrams due now, requester by requester in turn, as far as their pacing allows.

        ``batches(requester)`` says whether it takes packed datagrams, or None
        when it is no longer a live subscriber (its ranges are dropped).
        """
        out: list[tuple[bytes, Address]] = []
        budget = self.max_per_call
        for requester in list(self._jobs):
            if budget <= 0:
                break
            packed = batches(requester)
            if packed is None:
                self._drop(requester)
                continue
            sent = self._serve(requester, packed, now, recent, batch_bytes, out, budget)
            budget -= sent
            if requester in self._jobs:
                self._jobs.move_to_end(requester)  # the next call starts with the others
        return out

    def _serve(self, requester: Address, packed: bool, now: float, recent: RecentLog, batch_bytes: int,
               out: list[tuple[bytes, Address]], budget: int) -> int:
        jobs = self._jobs[requester]
        pacer = self._pacers[requester]
        sent = 0
        while jobs and sent < budget and pacer.ready(now):
            job = jobs[0]
            held = recent.datagram(job[0])
            if held is None or held.first > job[1]:  # nothing left of it in the log
                self._finish(requester, jobs)
                continue
            if packed:  # the datagram as it was sequenced
                datagrams = [held.data] if len(held.data) <= batch_bytes else \
                    codec.pack_greedy(held.frames(held.first, held.last), batch_bytes)
                job[0] = held.last + 1
            else:  # its frames one by one, as many as may go now
                first = max(job[0], held.first)
                room = max(1, min(int(pacer.datagrams), budget - sent))
                datagrams = held.frames(first, min(job[1], first + room - 1))
                job[0] = first + len(datagrams)
            self.frames += held.count if packed else len(datagrams)
            for datagram in datagrams:
                out.append((datagram, requester))
                pacer.take(len(datagram))
            sent += len(datagrams)
            if job[0] > job[1]:
                self._finish(requester, jobs)
        return sent

    def _finish(self, requester: Address, jobs: deque[list[int]]) -> None:
        jobs.popleft()
        self._count -= 1
        if not jobs:
            del self._jobs[requester]

    def _drop(self, requester: Address) -> None:
        self._count -= len(self._jobs.pop(requester))

    def next_deadline(self, now: float) -> float | None:
        """When :meth:`take` next has something to send (``now`` if at once); None with nothing queued."""
        if not self._jobs:
            return None
        return now + min(self._pacers[requester].wait(now) for requester in self._jobs)
