"""The recent messages a client keeps to answer FORWARDs, bounded by bytes."""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Iterator


class MemoryJournal:
    """Messages by sequence; the oldest received are evicted first once ``max_bytes`` is passed.

    Single writer (the client's receive thread) and single reader (its forwarder);
    each dict operation is atomic under the GIL, which is all they share.
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self._messages: OrderedDict[int, bytes] = OrderedDict()

    def __len__(self) -> int:
        return len(self._messages)

    def __contains__(self, seq: int) -> bool:
        return seq in self._messages

    def add(self, seq: int, data: bytes) -> None:
        self.add_many(((seq, data),))

    def add_many(self, messages: Iterable[tuple[int, bytes]]) -> None:
        """Keep each (sequence, payload) not kept yet; then evict the oldest beyond ``max_bytes``."""
        kept = self._messages
        limit = self.max_bytes
        added = 0
        for seq, data in messages:
            if seq not in kept and len(data) <= limit:
                kept[seq] = data
                added += len(data)
        self.bytes += added
        while self.bytes > limit:
            _, old = kept.popitem(last=False)
            self.bytes -= len(old)

    def get(self, seq: int) -> bytes | None:
        return self._messages.get(seq)

    def held(self, from_seq: int, to_seq: int) -> Iterator[tuple[int, bytes]]:
        """The messages held in ``from_seq..to_seq``, ascending; cheap for wide sparse ranges."""
        if to_seq - from_seq + 1 > 4 * len(self._messages):
            seqs = sorted(s for s in list(self._messages) if from_seq <= s <= to_seq)
        else:
            seqs = range(from_seq, to_seq + 1)
        for seq in seqs:
            data = self._messages.get(seq)
            if data is not None:
                yield seq, data
