"""Where each RESP value ends in what a gateway connection sends: one WebSocket message per value.

The Redis connection writes its replies to a byte stream, several values at a
time (a SUBSCRIBE of three channels is three confirmations in one write);
over a WebSocket each value travels as a message of its own, so the writes
are cut at value boundaries.  Pure and only for values the gateway itself
encoded (:mod:`fyrehose.gateways.redis.protocol`): a malformed value is a bug and
raises ValueError.
"""
from __future__ import annotations

# types whose value is the rest of the line
_LINE_TYPES = frozenset(b"+-:_,#(")
# types with a length line, then that many bytes and CRLF
_BLOB_TYPES = frozenset(b"$!=")
# aggregate types: a count line, then that many values (twice as many for maps and attributes)
_AGGREGATE_TYPES = {ord("*"): 1, ord(">"): 1, ord("~"): 1, ord("%"): 2, ord("|"): 2}


def split_values(data: bytes) -> list[bytes]:
    """``data`` (whole RESP values, back to back) cut into one bytes object per value."""
    values = []
    start = 0
    while start < len(data):
        end = _value_end(data, start)
        values.append(data[start:end])
        start = end
    return values


def _value_end(data: bytes, pos: int) -> int:
    """Where the value starting at ``pos`` ends (an attribute counts as part of the value it precedes)."""
    kind = data[pos]
    line_end = data.index(b"\r\n", pos)
    after = line_end + 2
    if kind in _LINE_TYPES:
        return after
    if kind in _BLOB_TYPES:
        length = int(data[pos + 1:line_end])
        if length < 0:
            return after
        end = after + length + 2
        if data[end - 2:end] != b"\r\n":
            raise ValueError("RESP blob without its CRLF")
        return end
    per_item = _AGGREGATE_TYPES.get(kind)
    if per_item is None:
        raise ValueError(f"not a RESP value type: {chr(kind)!r}")
    count = int(data[pos + 1:line_end])
    for _ in range(max(count, 0) * per_item):
        after = _value_end(data, after)
    if kind == ord("|"):  # an attribute: the value it annotates follows
        after = _value_end(data, after)
    return after
