"""The records the multi-process backbone's processes pass through their rings: pure packing and unpacking.

Ingress records go from a receive worker to the sequencer and carry what the
worker already checked: a PUSH record is the datagram's well-formed PUSH
frames, a KEEPALIVE or REQUEST record the resolved addresses.  Log records go
from the sequencer to the fan-out workers: DELIVER frames exactly as they go
on the wire behind a small header, and, whenever the client table changed,
the whole table, in line, so that every message goes to the subscribers of
the moment it was sequenced.
"""
from __future__ import annotations

import socket
import struct
from collections.abc import Iterable

from fyrehose.backbone.intake import KeepaliveIn, RequestIn
from fyrehose.protocol.codec import Address

PUSH_RECORD = 1
KEEPALIVE_RECORD = 2
REQUEST_RECORD = 3

_SOURCE = struct.Struct("<BxH4sQ")  # kind, source port, source IPv4 address, arrival time (ns)
_KEEPALIVE = struct.Struct("<4sH?xQ16s")  # client address, port, renew (a fresh cookie in the ACK), flags, token
_REQUEST = struct.Struct("<4sH2xQQ")  # requester address, port, from, to
_LOG = struct.Struct("<II")  # frame count, common frame size (0: sizes differ)
_CLIENT = struct.Struct("<4sHH")  # IPv4 address, port, flags (the low 16 bits are all that exist)
CLIENTS = 0xFFFFFFFF  # a log record's frame count that marks a client table instead of frames

SOURCE_SIZE = _SOURCE.size
LOG_HEADER_SIZE = _LOG.size


def push_record_size(payload: int) -> int:
    return SOURCE_SIZE + payload


def pack_push_header(into: memoryview, source: Address, arrival: int) -> None:
    """Write a PUSH record's header; the caller copies the frames in after ``SOURCE_SIZE`` bytes."""
    _SOURCE.pack_into(into, 0, PUSH_RECORD, source[1], socket.inet_aton(source[0]), arrival)


def pack_control(accepted: KeepaliveIn | RequestIn, source: Address, arrival: int) -> bytes:
    head = _SOURCE.pack(KEEPALIVE_RECORD if isinstance(accepted, KeepaliveIn) else REQUEST_RECORD,
                        source[1], socket.inet_aton(source[0]), arrival)
    if isinstance(accepted, KeepaliveIn):
        host, port = accepted.client
        return head + _KEEPALIVE.pack(socket.inet_aton(host), port, accepted.renew, accepted.flags, accepted.token)
    host, port = accepted.requester
    return head + _REQUEST.pack(socket.inet_aton(host), port, accepted.from_seq, accepted.to_seq)


def arrival(record: memoryview) -> int:
    """When the kernel received the record's datagram (CLOCK_REALTIME ns; 0 when not taken)."""
    return _SOURCE.unpack_from(record)[3]


def unpack_ingress(record: memoryview) -> tuple[int, Address, memoryview | KeepaliveIn | RequestIn]:
    """(kind, source, body): the PUSH frames as a view, or the accepted control frame."""
    kind, port, ip, _ = _SOURCE.unpack_from(record)
    source = (socket.inet_ntoa(ip), port)
    if kind == PUSH_RECORD:
        return kind, source, record[SOURCE_SIZE:]
    if kind == KEEPALIVE_RECORD:
        ip, port, renew, flags, token = _KEEPALIVE.unpack_from(record, SOURCE_SIZE)
        return kind, source, KeepaliveIn((socket.inet_ntoa(ip), port), flags, token, renew)
    if kind == REQUEST_RECORD:
        ip, port, from_seq, to_seq = _REQUEST.unpack_from(record, SOURCE_SIZE)
        return kind, source, RequestIn((socket.inet_ntoa(ip), port), from_seq, to_seq)
    raise ValueError(f"unknown ingress record kind {kind}")


def pack_log_header(into: memoryview, count: int, step: int) -> None:
    _LOG.pack_into(into, 0, count, step)


def unpack_log_header(record: memoryview) -> tuple[int, int]:
    """(frame count, common frame size or 0); the frames follow ``LOG_HEADER_SIZE`` bytes in."""
    return _LOG.unpack_from(record)


def pack_clients(clients: Iterable[tuple[Address, int]]) -> bytes:
    """A client table as bytes: (address, flags) rows."""
    pack = _CLIENT.pack
    return b"".join([pack(socket.inet_aton(host), port, flags & 0xFFFF) for (host, port), flags in clients])


def unpack_clients(blob: bytes | memoryview) -> list[tuple[Address, int]]:
    return [((socket.inet_ntoa(ip), port), flags) for ip, port, flags in _CLIENT.iter_unpack(blob)]


CLIENT_SIZE = _CLIENT.size
