"""The backbone as a pure state machine: datagrams and time in, datagrams out.

Every driver (the single-process loop, the multi-process workers, the tests)
feeds :meth:`Backbone.receive` and sends what :meth:`Backbone.flush` returns.
Sequencing rewrites PUSH frames into DELIVER frames in place (the two share a
layout), so a packed PUSH datagram becomes a packed DELIVER datagram without
rebuilding any frame.
"""
from __future__ import annotations

import ipaddress
import random
import struct
from collections import Counter
from dataclasses import dataclass, field

from fyrehose import codec
from fyrehose.addresses import Address
from fyrehose.backbone.clients import ClientTable
from fyrehose.backbone.confirms import ConfirmCache
from fyrehose.backbone.sequencing import DEFAULT_BLOCK, SequenceCounter, SequenceExhausted

_SEQ_FIELD = struct.Struct(">HI")
_ACK_PREFIX = bytes((codec.KEEPALIVE_ACK,))


@dataclass(slots=True)
class Outbox:
    """What a driver must do, in order: persist ``reserve`` (when set), then send."""

    reserve: int | None = None
    sends: list[tuple[bytes | memoryview, Address]] = field(default_factory=list)


class Backbone:
    def __init__(
        self,
        *,
        reserved: int = 0,
        reserve_block: int = DEFAULT_BLOCK,
        trusted_networks: tuple[ipaddress.IPv4Network, ...] = (),
        batch_bytes: int = codec.MAX_DATAGRAM,
        max_request_range: int = codec.MAX_REQUEST_SPAN,
        client_capacity: int = 65536,
        rng: random.Random | None = None,
    ) -> None:
        self.sequence = SequenceCounter(reserved, reserve_block)
        self.clients = ClientTable(client_capacity)
        self.confirmed = ConfirmCache()
        self.trusted_networks = trusted_networks
        self.batch_bytes = max(codec.FRAME_HEADER, min(batch_bytes, codec.MAX_DATAGRAM))
        self.max_request_range = max_request_range
        self.rng = rng or random.Random()
        self.counters: Counter[str] = Counter()
        self._trusted_sources: dict[str, bool] = {}
        # Sequenced frames not yet handed out: (view, [(start, end), ...]) per PUSH datagram.
        self._log: list[tuple[memoryview, list[tuple[int, int]]]] = []
        self._control: list[tuple[bytes | memoryview, Address]] = []
        self._confirms: dict[Address, list[bytes]] = {}

    # ------------------------------------------------------------ input

    def receive(self, datagram: bytes, source: Address, now: float) -> None:
        """Take one datagram from ``source``; malformed input is counted and dropped."""
        if not datagram:
            self._drop("malformed")
            return
        if len(datagram) > codec.MAX_DATAGRAM:
            self._drop("oversize")
            return
        kind = datagram[0]
        if kind == codec.PUSH:
            self._push(datagram, source, now)
            return
        try:
            frames = codec.decode(datagram)
        except codec.ProtocolError:
            self._drop("malformed")
            return
        frame = frames[0]
        if isinstance(frame, codec.Keepalive):
            self._keepalive(frame, source, now)
        elif isinstance(frame, codec.Request):
            self._request(frame, source, now)
        else:
            # DELIVER, FORWARD, CONFIRM and ACK only travel away from the backbone.
            self._drop("unexpected type")

    def _drop(self, reason: str) -> None:
        self.counters["drop:" + reason] += 1

    def _resolve(self, addr: str, port: int, source: Address) -> Address | None:
        """Apply "0.0.0.0 / port 0 = source" and refuse foreign addresses from untrusted sources."""
        host = source[0] if addr == "0.0.0.0" else addr
        if host != source[0] and not self._trusted(source[0]):
            self._drop("foreign address")
            return None
        return host, port or source[1]

    def _trusted(self, host: str) -> bool:
        known = self._trusted_sources.get(host)
        if known is None:
            ip = ipaddress.IPv4Address(host)
            known = any(ip in net for net in self.trusted_networks)
            if len(self._trusted_sources) > 4096:
                self._trusted_sources.clear()
            self._trusted_sources[host] = known
        return known

    def _keepalive(self, frame: codec.Keepalive, source: Address, now: float) -> None:
        addr = self._resolve(frame.addr, frame.port, source)
        if addr is None:
            return
        if not self.clients.refresh(addr, frame.flags, now):
            self._drop("client table full")
            return
        self.counters["keepalives"] += 1
        ack = _ACK_PREFIX + frame.token
        if frame.flags & codec.FLAG_HEAD:
            last = self.sequence.last_issued
            ack += _SEQ_FIELD.pack(last >> 32, last & 0xFFFFFFFF)
        self._control.append((ack, source))

    def _request(self, frame: codec.Request, source: Address, now: float) -> None:
        requester = self._resolve(frame.addr, frame.port, source)
        if requester is None:
            return
        self.counters["requests"] += 1
        last = self.sequence.last_issued
        if frame.from_seq > last:
            self._drop("request beyond last sequence")
            return
        to_seq = min(frame.to_seq, last, frame.from_seq + self.max_request_range - 1)
        journaler = self.clients.choose_journaler(now, requester, self.rng)
        if journaler is None:
            self._drop("no journaling client")
            return
        forward = codec.Forward(requester[0], requester[1], frame.from_seq, to_seq)
        self._control.append((codec.encode(forward), journaler))
        self.counters["forwards"] += 1

    def _push(self, datagram: bytes, source: Address, now: float) -> None:
        spans, error = codec.scan(datagram, codec.PUSH)
        if error is not None:
            self._drop("malformed")
        if not spans:
            return
        confirmed = self.confirmed
        keep = spans
        repeated: list[int] = []  # tags seen twice within this datagram: confirmed once sequenced
        if any(tag for _, _, tag in spans):
            keep = []
            fresh: set[int] = set()
            for span in spans:
                tag = span[2]
                seq = confirmed.lookup(source, tag) if tag else None
                if seq is not None:
                    self._confirm(source, tag, seq)
                    self.counters["duplicate pushes"] += 1
                elif tag in fresh:
                    repeated.append(tag)
                    self.counters["duplicate pushes"] += 1
                else:
                    if tag:
                        fresh.add(tag)
                    keep.append(span)
            if not keep:
                return
        try:
            seq = self.sequence.take(len(keep))
        except SequenceExhausted:
            self._drop("sequence space exhausted")
            return
        buf = bytearray(datagram[: keep[-1][1]])
        pack_seq = _SEQ_FIELD.pack_into
        bounds = []
        for start, end, tag in keep:
            buf[start] = codec.DELIVER
            pack_seq(buf, start + 3, seq >> 32, seq & 0xFFFFFFFF)
            if tag:
                confirmed.remember(source, tag, seq, now)
                self._confirm(source, tag, seq)
            bounds.append((start, end))
            seq += 1
        for tag in repeated:
            self._confirm(source, tag, confirmed.lookup(source, tag))
        self.counters["pushes"] += len(keep)
        base = bounds[0][0]
        if len(keep) == len(spans) or self._contiguous(bounds):
            self._log.append((memoryview(buf)[base:], [(s - base, e - base) for s, e in bounds]))
        else:
            view = memoryview(buf)
            for start, end in bounds:
                self._log.append((view[start:end], [(0, end - start)]))

    @staticmethod
    def _contiguous(bounds: list[tuple[int, int]]) -> bool:
        return all(bounds[i][1] == bounds[i + 1][0] for i in range(len(bounds) - 1))

    def _confirm(self, source: Address, tag: int, seq: int) -> None:
        self._confirms.setdefault(source, []).append(codec.encode_confirm(tag, seq))

    # ------------------------------------------------------------ output

    def pending(self) -> bool:
        return bool(self._log or self._control or self._confirms)

    def flush(self, now: float) -> Outbox:
        """Everything to send since the last flush: DELIVERs to every live subscriber, ACKs, CONFIRMs, FORWARDs."""
        out = Outbox()
        if self.sequence.unpersisted:
            out.reserve = self.sequence.reserved
            self.sequence.unpersisted = False
        sends = out.sends
        sends.extend(self._control)
        self._control = []
        for source, frames in self._confirms.items():
            entry = self.clients.get(source)
            if entry is not None and entry.batches:
                sends.extend((datagram, source) for datagram in codec.pack_greedy(frames))
            else:
                sends.extend((frame, source) for frame in frames)
            self.counters["confirms"] += len(frames)
        self._confirms = {}
        if self._log:
            plain, batch = self.clients.subscribers(now)
            messages = sum(len(bounds) for _, bounds in self._log)
            if plain:
                for view, bounds in self._log:
                    for start, end in bounds:
                        frame = view[start:end]
                        sends.extend((frame, addr) for addr in plain)
            if batch:
                for datagram in self._batches():
                    sends.extend((datagram, addr) for addr in batch)
            self.counters["delivered"] += messages * (len(plain) + len(batch))
            self._log = []
        self.counters["datagrams out"] += len(sends)
        return out

    def _batches(self) -> list[bytes]:
        """Pack the log into datagrams of at most ``batch_bytes``, splitting only between frames."""
        limit = self.batch_bytes
        out: list[bytes] = []
        parts: list[memoryview] = []
        size = 0
        for view, bounds in self._log:
            if size + len(view) <= limit:
                parts.append(view)
                size += len(view)
                continue
            for start, end in bounds:
                length = end - start
                if size + length > limit and parts:
                    out.append(b"".join(parts))
                    parts, size = [], 0
                parts.append(view[start:end])
                size += length
        if parts:
            out.append(b"".join(parts))
        return out
