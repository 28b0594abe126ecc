"""The bytes the load generators send, built once, so that the hot loops only stamp, slice and send.

Every target gets the same client-side work: a publisher pre-builds one
buffer of ``capacity`` messages in the target's protocol and, per send, writes
the current time into the first message and sends a prefix of the buffer (one
packed datagram for fyrehose, one pipelined write for Redis and NATS).  Only
that first message of each send carries the sample mark, so latency samples
cost nothing on the other messages.

Payload layout: ``@`` + CLOCK_MONOTONIC nanoseconds (8 bytes, big endian) +
``x`` filler for a sampled message, ``x`` filler for the others.  The clock is
system-wide on Linux, so a subscriber process can subtract a publisher
process's stamp.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

from fyrehose.protocol import codec

MARK = ord("@")
FILL = b"x"
STAMP = struct.Struct(">Q")
MIN_PAYLOAD = 1 + STAMP.size

CHANNEL = b"fyrehose-bench"  # the Redis channel and the NATS subject
NATS_SID = b"1"


def payload(size: int, sampled: bool) -> bytes:
    if size < MIN_PAYLOAD:
        raise ValueError(f"payloads must be at least {MIN_PAYLOAD} bytes (a sample mark and an 8-byte timestamp)")
    if sampled:
        return bytes((MARK,)) + bytes(STAMP.size) + FILL * (size - MIN_PAYLOAD)
    return FILL * size


@dataclass(frozen=True)
class Batch:
    """``capacity`` messages of ``record`` bytes each; the first one's payload holds the stamp at ``stamp_at``."""

    buffer: bytearray
    record: int
    stamp_at: int
    capacity: int

    def stamped(self, count: int, now_ns: int) -> memoryview:
        """The first ``count`` messages, the first of them stamped with ``now_ns``."""
        STAMP.pack_into(self.buffer, self.stamp_at, now_ns)
        return memoryview(self.buffer)[: count * self.record]


def _batch(head: bytes, payload_size: int, tail: bytes, capacity: int) -> Batch:
    if capacity < 1:
        raise ValueError("a batch holds at least one message")
    first = head + payload(payload_size, sampled=True) + tail
    rest = head + payload(payload_size, sampled=False) + tail
    return Batch(bytearray(first + rest * (capacity - 1)), len(first), len(head) + 1, capacity)


def push_batch(payload_size: int, capacity: int) -> Batch:
    """Untagged PUSH frames (no CONFIRM asked), packed back to back as one datagram carries them."""
    if payload_size > codec.MAX_PAYLOAD:
        raise ValueError(f"fyrehose carries at most {codec.MAX_PAYLOAD} bytes per message")
    head = codec.encode_push(bytes(payload_size))[: codec.FRAME_HEADER]
    return _batch(head, payload_size, b"", capacity)


def resp_publish_batch(payload_size: int, capacity: int, channel: bytes = CHANNEL) -> Batch:
    """Pipelined ``PUBLISH channel payload`` commands (RESP arrays of bulk strings)."""
    head = b"*3\r\n$7\r\nPUBLISH\r\n$%d\r\n%s\r\n$%d\r\n" % (len(channel), channel, payload_size)
    return _batch(head, payload_size, b"\r\n", capacity)


def nats_pub_batch(payload_size: int, capacity: int, subject: bytes = CHANNEL) -> Batch:
    """Pipelined ``PUB subject size`` operations."""
    return _batch(b"PUB %s %d\r\n" % (subject, payload_size), payload_size, b"\r\n", capacity)


def messages_per_send(payload_size: int) -> int:
    """How many messages one send carries, for every target alike: as many PUSH frames as fill one datagram."""
    return max(1, codec.MAX_DATAGRAM // (codec.FRAME_HEADER + payload_size))


# ---------------------------------------------------------------- handshakes


def resp_command(*args: bytes) -> bytes:
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(arg), arg) for arg in args)


def resp_message_head(payload_size: int, channel: bytes = CHANNEL) -> bytes:
    """What Redis puts before a payload it delivers to a RESP2 subscriber."""
    return b"*3\r\n$7\r\nmessage\r\n$%d\r\n%s\r\n$%d\r\n" % (len(channel), channel, payload_size)


NATS_CONNECT = b'CONNECT {"verbose":false,"pedantic":false,"name":"fyrehose-bench"}\r\n'
NATS_PING = b"PING\r\n"
NATS_PONG = b"PONG\r\n"


def nats_sub(subject: bytes = CHANNEL, sid: bytes = NATS_SID) -> bytes:
    return b"SUB %s %s\r\n" % (subject, sid)


def nats_message_head(payload_size: int, subject: bytes = CHANNEL, sid: bytes = NATS_SID) -> bytes:
    """What nats-server puts before a payload it delivers for subscription ``sid``."""
    return b"MSG %s %s %d\r\n" % (subject, sid, payload_size)
