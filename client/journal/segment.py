"""The formats of journal segment files: pure encoding and decoding, with torn-tail detection.

Format 2 (written since the journal records whole datagrams) is described
further down; format 1, below, is still read.

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

from fyrehose.errors import InputError
from fyrehose.protocol import codec
from fyrehose.protocol.codec import MAX_PAYLOAD, MAX_SEQUENCE

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


# ---------------------------------------------------------------- format 2: whole DELIVER datagrams
#
# A format-2 segment starts with the 8-byte FILE_HEADER and then holds blocks,
# each the DELIVER frames of one datagram as the backbone sent them (or of
# consecutive messages the journal packed itself), big endian::
#
#     FIRST_SEQ u64 | COUNT u32 | RECEIVED_AT i64 | LENGTH u32 | FRAMES | CRC32 u32
#
# with the CRC-32 over header and frames.  The frames carry sequences FIRST_SEQ ..
# FIRST_SEQ + COUNT - 1 in order, so a block is the per-datagram index entry
# (first sequence, count, offset) and its own payload at once, and can be sent
# back as a DELIVER datagram unchanged.  A format-1 file has no header: its
# first bytes are a record's sequence, whose top two bytes are zero, never "FY".

FORMAT_RECORDS = 1
FORMAT_BLOCKS = 2
FILE_HEADER = b"FYJSEG\x00\x02"
_MAGIC = FILE_HEADER[:7]
BLOCK_HEADER = struct.Struct(">QIqI")
BLOCK_OVERHEAD = BLOCK_HEADER.size + CHECKSUM.size  # 28 bytes around the frames of a datagram
MAX_FRAMES = 65507  # the largest DELIVER datagram: a block is always one sendable datagram
BAD_FRAMES = "frames do not match the block header"


class Block(NamedTuple):
    first: int  # the sequence of the first frame
    count: int  # type: ignore[assignment]  # a field named count: mypy takes it for an override of tuple.count
    received_at: int  # µs since the Unix epoch, UTC
    frames: bytes  # DELIVER frames first .. first + count - 1, back to back

    @property
    def last(self) -> int:
        return self.first + self.count - 1


class BlockScan(NamedTuple):
    """Like :class:`Scan`, for blocks: the intact ones from ``start`` on and where and why the scan stopped."""

    blocks: list[Block]
    offsets: list[int]
    end: int
    stop: str | None


def segment_format(head: bytes) -> int | None:
    """The format of a segment from its first bytes; None while too few bytes were written to tell.

    A file holding a strict prefix of :data:`FILE_HEADER` is a format-2 segment
    whose creation was cut short: it holds nothing.
    """
    if head[:len(_MAGIC)] == _MAGIC:
        if len(head) < len(FILE_HEADER):
            return None
        if head[len(_MAGIC)] != FORMAT_BLOCKS:
            raise SegmentError(f"segment format {head[len(_MAGIC)]} is newer than this fyrehose reads")
        return FORMAT_BLOCKS
    if _MAGIC.startswith(bytes(head)):
        return None
    return FORMAT_RECORDS


def block_size(frames_length: int) -> int:
    return BLOCK_OVERHEAD + frames_length


def frames_first(frames: bytes | memoryview, count: int) -> int:
    """The first sequence when ``frames`` are ``count`` well-formed DELIVER frames counting up by one, else 0."""
    step = codec.uniform_step(frames, codec.DELIVER)
    if step:
        if len(frames) // step != count:
            return 0
        return codec.consecutive_u48(frames, 3, step, count)
    spans, error = codec.scan(frames, codec.DELIVER)
    if error or len(spans) != count:
        return 0
    first = spans[0][2]
    if any(seq != first + i for i, (_, _, seq) in enumerate(spans)):
        return 0
    return first


def block_parts(first: int, count: int, received_at: int, frames: bytes) -> tuple[bytes, bytes, bytes]:
    """A block around ``frames`` as its three parts, so a writer can hand them to ``writev`` without copying the
    frames (checked by the caller: they must be DELIVERs first .. first + count - 1)."""
    if not 1 <= first or first + count - 1 > MAX_SEQUENCE or count < 1:
        raise SegmentError(f"sequences {first}..{first + count - 1} outside 1..{MAX_SEQUENCE}")
    if len(frames) > MAX_FRAMES:
        raise SegmentError(f"a block of {len(frames)} bytes exceeds one datagram ({MAX_FRAMES})")
    header = BLOCK_HEADER.pack(first, count, received_at, len(frames))
    return header, frames, CHECKSUM.pack(zlib.crc32(frames, zlib.crc32(header)))


def encode_block(first: int, count: int, received_at: int, frames: bytes) -> bytes:
    """A block around ``frames``, in one piece."""
    return b"".join(block_parts(first, count, received_at, frames))


def decode_blocks(buffer: bytes | bytearray | memoryview, start: int = 0) -> BlockScan:
    """Every intact block of ``buffer`` from ``start`` up to the first damaged or incomplete one.

    A block whose checksum holds but whose frames do not carry the sequences its
    header names is damage, not a torn write.
    """
    blocks: list[Block] = []
    offsets: list[int] = []
    size = len(buffer)
    offset = start
    view = memoryview(buffer)
    crc32 = zlib.crc32
    stop = None
    while offset < size:
        if size - offset < BLOCK_OVERHEAD:
            stop = INCOMPLETE
            break
        first, count, received_at, length = BLOCK_HEADER.unpack_from(buffer, offset)
        if length > MAX_FRAMES:
            stop = BAD_LENGTH
            break
        frames_at = offset + BLOCK_HEADER.size
        frames_end = frames_at + length
        if frames_end + CHECKSUM.size > size:
            stop = INCOMPLETE
            break
        if crc32(view[frames_at:frames_end], crc32(view[offset:frames_at])) != CHECKSUM.unpack_from(
                buffer, frames_end)[0]:
            stop = BAD_CHECKSUM
            break
        if not 1 <= first or count < 1 or first + count - 1 > MAX_SEQUENCE:
            stop = BAD_SEQUENCE
            break
        frames = bytes(view[frames_at:frames_end])
        if frames_first(frames, count) != first:
            stop = BAD_FRAMES
            break
        blocks.append(Block(first, count, received_at, frames))
        offsets.append(offset)
        offset = frames_end + CHECKSUM.size
    view.release()
    return BlockScan(blocks, offsets, offset, stop)


def block_records(block: Block) -> list[Record]:
    """The messages of a block as records (its receive time for each)."""
    spans, _ = codec.scan(block.frames, codec.DELIVER)
    frames, received = block.frames, block.received_at
    header = codec.FRAME_HEADER
    return [Record(seq, received, frames[start + header:end]) for start, end, seq in spans]


def cut_frames(block: Block, from_seq: int, to_seq: int) -> bytes:
    """The frames of ``from_seq..to_seq`` within a block, cut at frame boundaries (a DELIVER datagram)."""
    low, high = max(from_seq, block.first), min(to_seq, block.last)
    if low > high:
        return b""
    if low == block.first and high == block.last:
        return block.frames
    frames = block.frames
    step = codec.uniform_step(frames, codec.DELIVER)
    if step:
        return frames[(low - block.first) * step:(high - block.first + 1) * step]
    spans, _ = codec.scan(frames, codec.DELIVER)
    return frames[spans[low - block.first][0]:spans[high - block.first][1]]
