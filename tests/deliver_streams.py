"""Datagram streams a subscriber's connection may meet, for property tests of its receive path.

The backbone's DELIVERs in order (one frame or a run, of one size or of
several), with gaps, duplicates and re-deliveries, a stranger's copies, GONE
notices, and damaged datagrams (truncated, a byte changed); :func:`feed` runs
one through a :class:`~fyrehose.protocol.connection.BackboneConnection` on a
manual clock, timers included, and returns everything it gave back.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis import strategies as st

from fyrehose.protocol import codec
from fyrehose.protocol.connection import BackboneConnection, ConnectionOptions, DeliverForm
from fyrehose.protocol.tracker import TrackerOptions

BACKBONE = ("127.0.0.1", 2323)
STRANGER = ("127.0.0.1", 40999)
CLIENT_FLAGS = codec.FLAG_HEAD | codec.FLAG_REDELIVERING | codec.FLAG_BATCH


@st.composite
def options(draw: st.DrawFn) -> ConnectionOptions:
    delivers = draw(st.sampled_from(DeliverForm))
    buffer_runs = delivers is not DeliverForm.MESSAGES and draw(st.booleans())
    # a changed byte may number a frame 2**40 ahead: one REQUEST for the whole hole, not 2**27 of them
    return ConnectionOptions(flags=CLIENT_FLAGS, delivers=delivers, buffer_runs=buffer_runs,
                             tracker=TrackerOptions(max_request_span=1 << 48))


@st.composite
def streams(draw: st.DrawFn) -> list[tuple[str, bytes, Any]]:
    """(what, datagram, source) steps: mostly continuing the stream, sometimes not."""
    steps: list[tuple[str, bytes, Any]] = []
    cursor = draw(st.integers(1, 3))
    for _ in range(draw(st.integers(1, 30))):
        what = draw(st.sampled_from(["deliver"] * 6 + ["gone", "timers", "damaged", "stranger"]))
        if what == "timers":
            steps.append((what, b"", None))
            continue
        first = max(1, cursor + draw(st.sampled_from([0, 0, 0, 0, 1, 2, 5, -1, -3])))
        count = draw(st.integers(1, 5))
        if what == "gone":
            steps.append((what, codec.encode_gone(first, first + count - 1, draw(st.sampled_from(
                [codec.GONE_LOST, codec.GONE_NEVER_SENT]))), BACKBONE))
            continue
        sizes = [draw(st.integers(0, 6))] * count if draw(st.booleans()) else draw(
            st.lists(st.integers(0, 6), min_size=count, max_size=count))
        data = b"".join(codec.encode_deliver(first + index, bytes([index]) * size) for index, size in enumerate(sizes))
        if what == "damaged":
            raw = bytearray(data)
            if draw(st.booleans()):
                raw[draw(st.integers(0, len(raw) - 1))] = draw(st.integers(0, 255))
            else:
                del raw[draw(st.integers(0, len(raw) - 1)):]
            data = bytes(raw)
        steps.append((what, data, STRANGER if what == "stranger" else BACKBONE))
        if what != "stranger":
            cursor = max(cursor, first + count)
    return steps


def feed(make: Callable[[], BackboneConnection], start: int | None, stream: list[tuple[str, bytes, Any]]) -> list[Any]:
    """Everything a new connection (tracking from ``start``) gives back for ``stream``: each datagram's Incoming,
    each timer's datagrams and events, then its counters and its tracker's state."""
    connection = make()
    tracker = connection.track(start)
    out: list[Any] = []
    now = 1.0
    for what, data, source in stream:
        now += 0.05
        out.append(connection.handle_timers(now) if what == "timers" else connection.receive(data, source, now))
    out.append((dict(connection.stats), connection.tracker is tracker, tracker.next, tracker.highest, tracker.holes,
                tracker.duplicates, tracker.lost, tracker.never_sent))
    return out


def tokens(size: int) -> bytes:
    """Deterministic KEEPALIVE tokens, so two connections' timers send the same bytes."""
    return b"\x00" * size


def connection_for(connection_options: ConnectionOptions) -> Callable[[], BackboneConnection]:
    return lambda: BackboneConnection(BACKBONE, connection_options, token_source=tokens)
