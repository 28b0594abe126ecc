"""PUSH datagrams become DELIVER frames in place, and the log of them is cut into datagrams: pure byte work.

This is the per-message hot path of every backbone mode, so it avoids a
Python loop per frame where it can.  A datagram whose frames all have the same
length (the common case of a publisher packing fixed-size messages) is
validated and stamped with a handful of strided slice operations, which run in
C; so are its tags read and its CONFIRMs written when it carries tags; any
other datagram takes the frame-by-frame path of :func:`fyrehose.protocol.codec.scan`.
Both paths give byte-identical results.
"""
from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from fyrehose.protocol import codec

_RUN = codec.MAX_DATAGRAM // codec.FRAME_HEADER + 1  # most frames one datagram can hold
_DELIVER_RUN = bytes([codec.DELIVER]) * _RUN
_ZERO_RUN = bytes(_RUN)
_ZERO_TAG = bytes(codec.FRAME_HEADER - 3)
_CONFIRM_RUN = bytes([codec.CONFIRM]) * _RUN


def uniform_frames(datagram: bytes | bytearray | memoryview) -> int:
    """The frame size when ``datagram`` is only well-formed PUSH frames of one size (tagged or not); 0 otherwise."""
    return codec.uniform_step(datagram, codec.PUSH)


def untagged(datagram: bytes | bytearray | memoryview, step: int) -> bool:
    """Whether no frame of a uniform datagram (frames of ``step`` bytes) carries a tag."""
    if len(datagram) == step:  # one frame (the latency path at low rates): one comparison, not six
        return datagram[3:codec.FRAME_HEADER] == _ZERO_TAG
    zeros = _ZERO_RUN[:len(datagram) // step]
    return all(datagram[offset::step] == zeros for offset in range(3, codec.FRAME_HEADER))


def frame_tags(datagram: bytes | bytearray | memoryview, step: int) -> array | range:
    """The tags of a uniform datagram's frames, in order: a range when they count up by one (a batch)."""
    count = len(datagram) // step
    first = codec.consecutive_u48(datagram, 3, step, count)
    if first:
        return range(first, first + count)
    return codec.u48_column(datagram, 3, step, count)


def confirm_block(tags: array | range, first_seq: int) -> bytes:
    """CONFIRM frames for ``tags`` numbered from ``first_seq`` on, back to back: what encode_confirms makes, in C."""
    count = len(tags)
    size = codec.CONFIRM_SIZE
    out = bytearray(size * count)
    out[0::size] = _CONFIRM_RUN[:count]
    if isinstance(tags, range):  # a batch's consecutive tags
        codec.put_consecutive_u48(out, 1, size, tags.start, count)
    else:
        codec.put_u48_column(out, 1, size, tags)
    codec.put_consecutive_u48(out, 7, size, first_seq, count)
    return bytes(out)


def stamp_uniform(buf: bytearray, step: int, first_seq: int) -> None:
    """Turn ``len(buf) // step`` PUSH frames of ``step`` bytes into DELIVERs numbered from ``first_seq``."""
    count = len(buf) // step
    buf[0::step] = _DELIVER_RUN[:count]
    codec.put_consecutive_u48(buf, 3, step, first_seq, count)


@dataclass(slots=True)
class LogEntry:
    """Consecutive sequenced DELIVER frames, back to back as they go on the wire.

    ``step`` is the common frame size (0 when sizes differ); ``bounds`` lists
    each frame's (start, end) and is computed on demand when not given.
    """

    view: memoryview
    count: int
    step: int = 0
    bounds: list[tuple[int, int]] | None = None
    address: int = 0  # where view[0] lives in memory, for drivers that pass slices to the kernel

    def frame_bounds(self) -> list[tuple[int, int]]:
        if self.bounds is None:
            if self.step:
                step = self.step
                self.bounds = [(start, start + step) for start in range(0, len(self.view), step)]
            else:
                spans, _ = codec.scan(self.view, codec.DELIVER)
                self.bounds = [(start, end) for start, end, _ in spans]
        return self.bounds

    def frames(self) -> Iterator[memoryview]:
        view = self.view
        if self.step:
            step = self.step
            return (view[start:start + step] for start in range(0, len(view), step))
        return (view[start:end] for start, end in self.frame_bounds())


Part = tuple[LogEntry, int, int]  # a slice (start, end) of one entry's view


def batch_parts(entries: Iterable[LogEntry], limit: int) -> Iterator[list[Part]]:
    """Greedily group the log into datagrams of at most ``limit`` bytes, splitting only between frames.

    Yields each datagram as the list of its parts, so a driver can join them
    (:func:`join_parts`) or hand them to the kernel as an iovec.  A frame larger
    than ``limit`` goes alone.
    """
    parts: list[Part] = []
    size = 0
    for entry in entries:
        total = len(entry.view)
        if size + total <= limit:
            parts.append((entry, 0, total))
            size += total
            continue
        if entry.step:
            step = entry.step
            pos = 0
            while pos < total:
                room = (limit - size) // step
                if room <= 0:
                    if parts:
                        yield parts
                        parts, size = [], 0
                        continue
                    room = 1
                take = min(room, (total - pos) // step) * step
                parts.append((entry, pos, pos + take))
                size += take
                pos += take
            continue
        for start, end in entry.frame_bounds():
            length = end - start
            if size + length > limit and parts:
                yield parts
                parts, size = [], 0
            parts.append((entry, start, end))
            size += length
    if parts:
        yield parts


def join_parts(parts: list[Part]) -> bytes | memoryview:
    """One datagram from its parts; a single part is sent as it is, without a copy."""
    if len(parts) == 1:
        entry, start, end = parts[0]
        return entry.view[start:end]
    return b"".join([entry.view[start:end] for entry, start, end in parts])
