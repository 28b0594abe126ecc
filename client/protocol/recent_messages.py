"""The recent messages a client keeps to answer FORWARDs, bounded by bytes."""
from __future__ import annotations

from bisect import bisect_right, insort
from collections import OrderedDict
from collections.abc import Iterable, Iterator

from fyrehose.protocol.frame_run import FrameRun


class RecentMessages:
    """Messages by sequence; the oldest received are evicted first once ``max_bytes`` is passed.

    A message is kept on its own, or inside the :class:`FrameRun` it arrived
    in (one entry for a whole datagram, found by bisecting the runs' first
    sequences), whichever the receiving driver hands over.

    Single writer (the client's receive thread) and single reader (its forwarder);
    each dict and list operation is atomic under the GIL, which is all they share.
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self._count = 0
        self._entries: OrderedDict[int, bytes | FrameRun] = OrderedDict()  # by (first) sequence, oldest first
        self._run_firsts: list[int] = []  # the runs' first sequences, ascending
        self._highest = 0  # no sequence above this was ever kept (evicted ones included)

    def __len__(self) -> int:
        return self._count

    def __contains__(self, seq: int) -> bool:
        return self.get(seq) is not None

    def add(self, seq: int, data: bytes) -> None:
        self.add_many(((seq, data),))

    def add_many(self, messages: Iterable[tuple[int, bytes]]) -> None:
        """Keep each (sequence, payload) not kept yet; then evict the oldest beyond ``max_bytes``."""
        entries = self._entries
        limit = self.max_bytes
        added = count = 0
        last_run = self._in_run(self._run_firsts[-1]) if self._run_firsts else None  # runs never overlap: it ends last
        runs_end = last_run.last if last_run is not None else 0  # a message after it lies in no run
        for seq, data in messages:
            if seq not in entries and len(data) <= limit and not (seq <= runs_end and self._in_run(seq)):
                entries[seq] = data
                added += len(data)
                count += 1
                if seq > self._highest:
                    self._highest = seq
        self.bytes += added
        self._count += count
        self._evict()

    def add_run(self, run: FrameRun) -> None:
        """Keep a whole datagram's frames as one entry; one by one if an end of it or another run is kept already.

        A connection hands over only runs that continue its stream, which
        nothing kept can overlap; a message kept alone strictly inside a run
        added later would be kept twice (and answered once).
        """
        beyond = run.first > self._highest  # the usual case: nothing kept can overlap it, and it is the last run
        if not beyond and (run.first in self or run.last in self or self._overlaps(run)):
            self.add_many(run.messages())
            return
        if len(run.data) > self.max_bytes:
            return
        self._entries[run.first] = run
        if beyond:
            self._run_firsts.append(run.first)
        else:
            insort(self._run_firsts, run.first)
        self._highest = max(self._highest, run.last)
        self.bytes += len(run.data)
        self._count += run.count
        self._evict()

    def get(self, seq: int) -> bytes | None:
        entry = self._entries.get(seq)
        if isinstance(entry, bytes):
            return entry
        run = entry if entry is not None else self._in_run(seq)
        return run.payload(seq) if run is not None else None

    def held(self, from_seq: int, to_seq: int) -> Iterator[tuple[int, bytes]]:
        """The messages held in ``from_seq..to_seq``, ascending; cheap for wide sparse ranges."""
        if to_seq - from_seq + 1 <= 4 * self._count:
            for seq in range(from_seq, to_seq + 1):
                data = self.get(seq)
                if data is not None:
                    yield seq, data
            return
        found: list[tuple[int, bytes]] = []
        for key, entry in list(self._entries.items()):
            if isinstance(entry, bytes):
                if from_seq <= key <= to_seq:
                    found.append((key, entry))
            elif entry.first <= to_seq and from_seq <= entry.last:
                found.extend(entry.messages(from_seq, to_seq))
        yield from sorted(dict(found).items())  # a message kept twice (alone and in a run) once

    def _in_run(self, seq: int) -> FrameRun | None:
        firsts = self._run_firsts
        index = bisect_right(firsts, seq) - 1
        if index < 0:
            return None
        run = self._entries.get(firsts[index])
        return run if isinstance(run, FrameRun) and seq <= run.last else None

    def _overlaps(self, run: FrameRun) -> bool:
        """Whether a kept run starts inside ``run`` (its ends are checked by the caller)."""
        firsts = self._run_firsts
        index = bisect_right(firsts, run.last) - 1
        return index >= 0 and firsts[index] >= run.first

    def _evict(self) -> None:
        entries = self._entries
        while self.bytes > self.max_bytes:
            first, old = entries.popitem(last=False)
            if isinstance(old, FrameRun):
                self.bytes -= len(old.data)
                self._count -= old.count
                firsts = self._run_firsts
                del firsts[bisect_right(firsts, first) - 1]
            else:
                self.bytes -= len(old)
                self._count -= 1
