"""What subscribers run on every byte they receive: count messages, read the stamps of sampled ones.

A Python loop per message would make the load generator the bottleneck long
before any server, so the common case — a run of whole messages of the one
size the bench publishes — is recognised with strided slices and
``bytes.count``/``lstrip``, all C loops: the bytes at each message boundary
must be the message head's first byte, the ones before it CR LF, and the
head must occur once per message.  A timestamp is decoded only where the
strided slice of first payload bytes holds the sample mark.  Anything else
(subscribe confirmations, PINGs, error replies, a message cut by a read
boundary) goes through a real parser, so counting stays exact.

Pure: bytes in, counts and stamps out.  A server error or a malformed stream
raises :class:`StreamError`; the driver reports it and ends the run, since a
TCP stream cannot be resynchronised.
"""
from __future__ import annotations

import abc
import struct

from fyrehose.protocol import codec
from fyrehose.tools.bench.wire import MARK, MIN_PAYLOAD, STAMP, nats_message_head, resp_message_head

MAX_LINE = 64 * 1024  # longest control line or bulk header accepted before the stream is declared broken
MAX_TRACKED_SEQUENCE = 1 << 28  # a byte each: 256 MiB at most per subscriber, far beyond any step's count
_SEQUENCE = struct.Struct(">HI")
_ONES = b"\x01" * (codec.MAX_DATAGRAM // (codec.FRAME_HEADER + MIN_PAYLOAD))  # the most frames a datagram holds


class StreamError(ValueError):
    """The server sent an error, or bytes that do not follow its protocol."""


def _stamps(buf: bytes | bytearray, marks: bytes | bytearray, first_payload: int, record: int) -> list[int]:
    """Stamps of the messages whose payload starts with the mark; ``marks`` holds every payload's first byte."""
    stamps = []
    index = marks.find(MARK)
    while index >= 0:
        at = first_payload + index * record + 1
        stamps.append(STAMP.unpack_from(buf, at)[0])
        index = marks.find(MARK, index + 1)
    return stamps


def _stamp_of(data: bytes | bytearray | memoryview) -> list[int]:
    if len(data) >= MIN_PAYLOAD and data[0] == MARK:
        return [STAMP.unpack_from(data, 1)[0]]
    return []


class DeliverScanner:
    """Counts the distinct DELIVER frames of fyrehose datagrams (packed for BATCH subscribers, one each otherwise).

    Unlike a TCP stream, UDP may duplicate or reorder, and a backbone under
    test might re-send; counting each sequence number once keeps a duplicate
    from hiding a loss.  A byte per sequence number (a fresh backbone starts
    at 1) records what arrived; a datagram of consecutive sequences is
    checked and marked with one slice operation.
    """

    def __init__(self, payload_size: int) -> None:
        self.payload_size = payload_size
        self.record = codec.FRAME_HEADER + payload_size
        self._length = payload_size.to_bytes(2, "big")
        self._seen = bytearray(1 << 16)
        self.malformed = 0  # datagrams with a frame that does not follow the protocol (frames before it count)
        self.other = 0  # datagrams that are not DELIVERs (KEEPALIVE-ACKs)
        self.duplicates = 0  # frames whose sequence number had arrived before
        self.untracked = 0  # frames numbered 0 or beyond MAX_TRACKED_SEQUENCE: not counted

    def scan(self, datagram: bytes) -> tuple[int, list[int]]:
        """Return (frames not seen before, stamps of the sampled frames)."""
        if not datagram or datagram[0] != codec.DELIVER:
            self.other += 1
            return 0, []
        record = self.record
        count, rest = divmod(len(datagram), record)
        if (
            not rest
            and not datagram[0::record].lstrip(b"\x01")
            and not datagram[1::record].lstrip(self._length[:1])
            and not datagram[2::record].lstrip(self._length[1:])
        ):
            first = _sequence(datagram, 0)
            last = _sequence(datagram, (count - 1) * record)
            if last - first + 1 == count and 0 < first and last < MAX_TRACKED_SEQUENCE:
                return self._mark_run(first, last), _stamps(
                    datagram, datagram[codec.FRAME_HEADER::record], codec.FRAME_HEADER, record)
        spans, error = codec.scan(datagram, codec.DELIVER)
        if error is not None:
            self.malformed += 1
        fresh = 0
        stamps = []
        for start, end, seq in spans:
            if 0 < seq < MAX_TRACKED_SEQUENCE:
                fresh += self._mark_run(seq, seq)
            else:
                self.untracked += 1
            stamps += _stamp_of(memoryview(datagram)[start + codec.FRAME_HEADER:end])
        return fresh, stamps

    def _mark_run(self, first: int, last: int) -> int:
        seen = self._seen
        if last >= len(seen):
            seen.extend(bytes(max(last + 1, 2 * len(seen)) - len(seen)))
        count = last - first + 1
        repeated = seen.count(1, first, last + 1)
        seen[first:last + 1] = _ONES[:count]
        self.duplicates += repeated
        return count - repeated


def _sequence(datagram: bytes, frame_start: int) -> int:
    high, low = _SEQUENCE.unpack_from(datagram, frame_start + 3)
    return (high << 32) | low


class _RecordStream(abc.ABC):
    """A TCP byte stream of fixed-size message records (``head`` + payload + CR LF) and other values.

    Subclasses parse one value of their protocol in :meth:`_parse`; this class
    counts the runs of plain records at C speed around them.
    """

    def __init__(self, head: bytes, payload_size: int) -> None:
        self.head = head
        self.payload_size = payload_size
        self.record = len(head) + payload_size + 2
        self._first = head[:1]
        self._buf = bytearray()

    def feed(self, chunk: bytes) -> tuple[int, list[int]]:
        """Take the next bytes of the stream; return how many messages completed and their samples' stamps."""
        buf = self._buf
        buf += chunk
        size = len(buf)
        record = self.record
        head = self.head
        count = 0
        stamps: list[int] = []
        pos = 0
        while pos < size:
            whole = (size - pos) // record
            run = self._run(buf, pos, whole) if whole else 0
            if run:
                end = pos + run * record
                at = pos + len(head)
                stamps += _stamps(buf, buf[at:end:record], at, record)
                count += run
                pos = end
                continue
            if not whole:
                part = bytes(buf[pos:pos + len(head)])
                if head.startswith(part):
                    break  # the start of a record: wait for the rest of it
            parsed = self._parse(buf, pos)
            if parsed is None:
                break
            pos, data = parsed
            if data is not None:
                count += 1
                stamps += _stamp_of(data)
        del buf[:pos]
        return count, stamps

    def _run(self, buf: bytearray, pos: int, whole: int) -> int:
        """How many plain records start at ``pos`` (at most ``whole``), judged by C-level scans only."""
        record = self.record
        end = pos + whole * record
        run = whole - len(buf[pos:end:record].lstrip(self._first))
        if run:
            run = min(run, whole - len(buf[pos + record - 2:end:record].lstrip(b"\r")))
        if run:
            run = min(run, whole - len(buf[pos + record - 1:end:record].lstrip(b"\n")))
        if run and buf.count(self.head, pos, pos + run * record) != run:
            return 0
        return run

    @abc.abstractmethod
    def _parse(self, buf: bytearray, pos: int) -> tuple[int, bytes | None] | None:
        """Parse one value at ``pos``: None if incomplete, else (end, payload if it was a message else None)."""


def _line_end(buf: bytes | bytearray, pos: int) -> int:
    end = buf.find(b"\r\n", pos)
    if end < 0 and len(buf) - pos > MAX_LINE:
        raise StreamError(f"no line end within {MAX_LINE} bytes")
    return end


def _number(text: bytes | bytearray, what: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise StreamError(f"bad {what} {bytes(text)[:40]!r}") from None


class RespStream(_RecordStream):
    """What a Redis RESP2 subscriber receives: ``message`` pushes, subscribe confirmations, replies."""

    def __init__(self, payload_size: int) -> None:
        super().__init__(resp_message_head(payload_size), payload_size)
        self.subscribed = 0  # subscribe confirmations seen

    def _parse(self, buf: bytearray, pos: int) -> tuple[int, bytes | None] | None:
        parsed = parse_resp(buf, pos)
        if parsed is None:
            return None
        value, end = parsed
        if isinstance(value, list) and len(value) == 3 and value[0] == b"message":
            if not isinstance(value[2], bytes):
                raise StreamError("message push without a payload")
            return end, value[2]
        if isinstance(value, list) and value and value[0] == b"subscribe":
            self.subscribed += 1
            return end, None
        raise StreamError(f"unexpected reply from Redis: {value!r:.80}")


RespValue = bytes | int | None | list


def parse_resp(buf: bytes | bytearray, pos: int = 0) -> tuple[RespValue, int] | None:
    """One RESP2 value at ``pos`` and where it ends, or None when the bytes so far do not complete it.

    An error reply raises :class:`StreamError`: the bench never expects one.
    """
    end = _line_end(buf, pos)
    if end < 0:
        return None
    kind = buf[pos]
    text = buf[pos + 1:end]
    if kind == ord("+"):
        return bytes(text), end + 2
    if kind == ord("-"):
        raise StreamError(f"Redis replied with an error: {bytes(text).decode('utf-8', 'replace')}")
    if kind == ord(":"):
        return _number(text, "integer"), end + 2
    if kind == ord("$"):
        length = _number(text, "bulk length")
        if length < 0:
            return None, end + 2
        stop = end + 2 + length
        if len(buf) < stop + 2:
            return None
        if buf[stop:stop + 2] != b"\r\n":
            raise StreamError("bulk string not followed by CR LF")
        return bytes(buf[end + 2:stop]), stop + 2
    if kind == ord("*"):
        length = _number(text, "array length")
        items: list = []
        at = end + 2
        for _ in range(max(length, 0)):
            parsed = parse_resp(buf, at)
            if parsed is None:
                return None
            item, at = parsed
            items.append(item)
        return (items if length >= 0 else None), at
    raise StreamError(f"not a RESP value: {bytes(buf[pos:pos + 40])!r}")


class NatsStream(_RecordStream):
    """What a NATS client receives: ``MSG`` operations, INFO, PING, PONG, +OK and -ERR."""

    def __init__(self, payload_size: int) -> None:
        super().__init__(nats_message_head(payload_size), payload_size)
        self.pings = 0  # PINGs not answered yet: the driver sends a PONG for each and resets this
        self.pongs = 0

    def _parse(self, buf: bytearray, pos: int) -> tuple[int, bytes | None] | None:
        end = _line_end(buf, pos)
        if end < 0:
            return None
        line = bytes(buf[pos:end])
        op = line.split(b" ", 1)[0].upper()
        if op == b"MSG":
            fields = line.split()
            if len(fields) not in (4, 5):
                raise StreamError(f"bad MSG line {line[:80]!r}")
            length = _number(fields[-1], "MSG size")
            start = end + 2
            stop = start + length
            if len(buf) < stop + 2:
                return None
            if buf[stop:stop + 2] != b"\r\n":
                raise StreamError("MSG payload not followed by CR LF")
            return stop + 2, bytes(buf[start:stop])
        if op == b"PING":
            self.pings += 1
        elif op == b"PONG":
            self.pongs += 1
        elif op == b"-ERR":
            raise StreamError(f"nats-server replied with an error: {line[5:].decode('utf-8', 'replace')}")
        elif op not in (b"+OK", b"INFO"):
            raise StreamError(f"unexpected operation from nats-server: {line[:80]!r}")
        return end + 2, None


def resp_reply_error(chunk: bytes) -> str | None:
    """The error in a chunk of PUBLISH replies, if any.

    A publisher gets one ``:N`` reply per PUBLISH; parsing each would cost more
    than publishing, so it only looks for the ``-`` that starts an error reply
    (integer replies here are never negative).
    """
    at = chunk.find(b"-")
    if at < 0:
        return None
    return chunk[at + 1:].split(b"\r\n", 1)[0].decode("utf-8", "replace") or "(error reply cut by a read boundary)"
