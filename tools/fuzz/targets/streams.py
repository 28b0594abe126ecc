"""The invariant shared by the incremental gateway parsers: bytes split anywhere parse as the whole does."""
from __future__ import annotations

from collections.abc import Callable


def split_points(data: bytes) -> list[int]:
    """Split positions derived from the input itself, so a fuzzer explores them too."""
    if not data:
        return []
    return sorted({data[0] % (len(data) + 1), len(data) // 2, max(0, len(data) - 1)})


def check_incremental(new_parser: Callable[[], object], feed: Callable[[object, bytes], list], data: bytes) -> None:
    """Feeding ``data`` whole, byte chunks at the split points, or one byte at a time gives the same results."""
    whole = feed(new_parser(), data)
    parser = new_parser()
    pieces, start = [], 0
    for point in split_points(data) + [len(data)]:
        pieces.append(data[start:point])
        start = point
    chunked = [item for piece in pieces for item in feed(parser, piece)]
    assert chunked == whole, f"split feeding differs: {chunked!r} != {whole!r}"
    if len(data) <= 64:
        parser = new_parser()
        bytewise = [item for i in range(len(data)) for item in feed(parser, data[i:i + 1])]
        assert bytewise == whole, f"byte-wise feeding differs: {bytewise!r} != {whole!r}"
