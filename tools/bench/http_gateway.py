"""The HTTP gateway's part of ``fyrehose gateway bench``: WebSocket and SSE subscribers.

``websocket-gateway``: subscribers are RESP-over-WebSocket connections (the
Python ``websockets`` client) that SUBSCRIBE, as the Redis clients do beside
them; the publisher is one more such connection sending pipelines of 500
PUBLISH commands per WebSocket message, the redis-py pipeline's batch.
``sse-gateway``: subscribers are ``GET /v1/stream/<channel>`` responses read
with asyncio (events counted as they arrive); the publisher is the same
WebSocket pipeline.  Both run against an ``http`` gateway of their own, and
the figure is the bench's: messages/s per subscriber, from the first publish
until every subscriber has every message.
"""
from __future__ import annotations

import asyncio
import time

from fyrehose.errors import CommandFailed

BATCH = 500
TARGETS = {"websocket-gateway": "http", "sse-gateway": "http"}  # bench target -> gateway kind


def _connect(address: tuple[str, int], **options):
    try:
        from websockets.asyncio.client import connect
    except ImportError:
        raise CommandFailed("the websocket and SSE targets need the websockets package (pip install websockets)") from None
    return connect(f"ws://{address[0]}:{address[1]}/resp", max_size=None, **options)


def _publish_command(channel: bytes, payload: bytes) -> bytes:
    return b"*3\r\n$7\r\nPUBLISH\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n" % (len(channel), channel, len(payload), payload)


async def _publish(address: tuple[str, int], messages: int, channel: str, payload: bytes) -> None:
    command = _publish_command(channel.encode(), payload)
    async with _connect(address) as publisher:
        for start in range(0, messages, BATCH):
            count = min(BATCH, messages - start)
            await publisher.send(command * count)
            for _ in range(count):  # one reply per PUBLISH, each its own message
                reply = await publisher.recv()
                if not reply.startswith(b":"):
                    raise CommandFailed(f"PUBLISH through the HTTP gateway failed: {reply[:200]!r}")


async def websocket(address: tuple[str, int], messages: int, subscribers: int, channel: str,
                    payload: bytes) -> float:
    """Seconds for ``messages`` to reach each of ``subscribers`` RESP-over-WebSocket subscribers."""
    connections = [await _connect(address, max_queue=None).__aenter__() for _ in range(subscribers)]
    try:
        for ws in connections:
            await ws.send(b"SUBSCRIBE " + channel.encode() + b"\r\n")
            await asyncio.wait_for(ws.recv(), 10)

        async def receive(ws) -> None:
            for _ in range(messages):
                await ws.recv()

        started = time.perf_counter()
        readers = [asyncio.create_task(receive(ws)) for ws in connections]
        await _publish(address, messages, channel, payload)
        await asyncio.gather(*readers)
        return time.perf_counter() - started
    finally:
        for ws in connections:
            await ws.close()


async def sse(address: tuple[str, int], messages: int, subscribers: int, channel: str, payload: bytes) -> float:
    """Seconds for ``messages`` to reach each of ``subscribers`` Server-Sent Event streams."""
    streams = []
    for _ in range(subscribers):
        reader, writer = await asyncio.open_connection(*address)
        writer.write(f"GET /v1/stream/{channel} HTTP/1.1\r\nHost: bench\r\nAccept: text/event-stream\r\n\r\n".encode())
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        if not head.startswith(b"HTTP/1.1 200 "):
            raise CommandFailed(f"the SSE stream was refused: {head[:200]!r}")
        streams.append((reader, writer))

    marker = b"\nevent: "

    async def receive(reader) -> None:
        received, tail = 0, b""
        while received < messages:
            data = await reader.read(1 << 20)
            if not data:
                raise CommandFailed("the HTTP gateway ended an SSE stream")
            window = tail + data
            received += window.count(marker)
            tail = window[-(len(marker) - 1):]

    try:
        started = time.perf_counter()
        readers = [asyncio.create_task(receive(reader)) for reader, _ in streams]
        await _publish(address, messages, channel, payload)  # each stream subscribed before its head was sent
        await asyncio.gather(*readers)
        return time.perf_counter() - started
    finally:
        for _, writer in streams:
            writer.close()


DRIVERS = {"websocket-gateway": websocket, "sse-gateway": sse}
