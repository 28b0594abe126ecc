"""The record format of journal segment files: pure encoding and decoding, with torn-tail detection.

A segment is a plain concatenation of records, so the journal appends a whole
batch with one write and finds, after a crash, where the durable part ends by
scanning: every record carries its length and a CRC-32 over header and data,
and the first record that is cut short or fails its checksum marks the end of
what was written completely.  Nothing here touches a file.

Record layout (big endian)::

    SEQ u64 | RECEIVED_AT i64 (µs since the Unix epoch, UTC) | LENGTH u32 | DATA | CRC32 u32
"""
from __future__ import annotations

import re
import struct
import zlib
from typing import NamedTuple

from fyrehose.codec import MAX_PAYLOAD, MAX_SEQUENCE
from fyrehose.errors import InputError

HEADER = struct.Struct(">QqI")
CHECKSUM = struct.Struct(">I")
OVERHEAD = HEADER.size + CHECKSUM.size  # 24 bytes around every payload
MAX_DATA = MAX_PAYLOAD
_I64 = (-(1 << 63), (1 << 63) - 1)

LOG_SUFFIX = ".log"
SUMMARY_SUFFIX = ".idx"
_NAME = re.compile(r"seg-(\d{16})\.(log|idx)")

# Why a scan stopped before the end of its buffer.
INCOMPLETE = "incomplete record"  # the buffer ends inside a record: a torn tail, or a read boundary
BAD_LENGTH = "bad length"
BAD_SEQUENCE = "bad sequence"
BAD_CHECKSUM = "bad checksum"


class Record(NamedTuple):
    seq: int
    received_at: int  # µs since the Unix epoch, UTC
    data: bytes


class Scan(NamedTuple):
    """The complete, intact records of a buffer from ``start`` on, and where and why the scan stopped.

    ``offsets[i]`` is where ``records[i]`` starts; ``end`` is the offset just
    after the last intact record; ``stop`` is None when the records fill the
    buffer exactly, else one of the reasons above.
    """

    records: list[Record]
    offsets: list[int]
    end: int
    stop: str | None


class SegmentError(InputError):
    """A record that cannot be encoded, or a segment file that is not what it claims to be."""


def record_size(length: int) -> int:
    return OVERHEAD + length


def encode_record(seq: int, received_at: int, data: bytes) -> bytes:
    if not 1 <= seq <= MAX_SEQUENCE:
        raise SegmentError(f"sequence {seq} outside 1..{MAX_SEQUENCE}")
    if not _I64[0] <= received_at <= _I64[1]:
        raise SegmentError(f"receive time {received_at} does not fit 64 bits")
    if len(data) > MAX_DATA:
        raise SegmentError(f"payload of {len(data)} bytes exceeds {MAX_DATA}")
    body = HEADER.pack(seq, received_at, len(data)) + data
    return body + CHECKSUM.pack(zlib.crc32(body))


def decode_records(buffer: bytes | bytearray | memoryview, start: int = 0) -> Scan:
    """Every intact record of ``buffer`` from offset ``start`` up to the first damaged or incomplete one."""
    records: list[Record] = []
    offsets: list[int] = []
    size = len(buffer)
    offset = start
    header_size = HEADER.size
    unpack_header = HEADER.unpack_from
    unpack_checksum = CHECKSUM.unpack_from
    crc32 = zlib.crc32
    view = memoryview(buffer)
    stop = None
    while offset < size:
        if size - offset < OVERHEAD:
            stop = INCOMPLETE
            break
        seq, received_at, length = unpack_header(buffer, offset)
        if length > MAX_DATA:
            stop = BAD_LENGTH
            break
        body_end = offset + header_size + length
        if body_end + CHECKSUM.size > size:
            stop = INCOMPLETE
            break
        if crc32(view[offset:body_end]) != unpack_checksum(buffer, body_end)[0]:
            stop = BAD_CHECKSUM
            break
        if not 1 <= seq <= MAX_SEQUENCE:
            stop = BAD_SEQUENCE
            break
        records.append(Record(seq, received_at, bytes(view[offset + header_size:body_end])))
        offsets.append(offset)
        offset = body_end + CHECKSUM.size
    view.release()
    return Scan(records, offsets, offset, stop)


def log_name(first_seq: int) -> str:
    """A segment is named by the first sequence it holds, so names sort in sequence order."""
    return f"seg-{first_seq:016d}{LOG_SUFFIX}"


def summary_name(first_seq: int) -> str:
    return f"seg-{first_seq:016d}{SUMMARY_SUFFIX}"


def parse_name(name: str) -> tuple[int, str] | None:
    """``(first_seq, suffix)`` of a segment or summary file name; None for any other name."""
    match = _NAME.fullmatch(name)
    if match is None:
        return None
    return int(match.group(1)), "." + match.group(2)
