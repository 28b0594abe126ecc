"""The load-generator processes: a publisher and a subscriber for each protocol, each in its own process.

A process talks to the orchestrator over a pipe: it connects (and
subscribes), sends ``("ready", pid)``, waits for ``("start", start, end,
deadline)`` — CLOCK_MONOTONIC times, shared by every process on Linux — then
publishes from ``start`` to ``end`` or counts until ``deadline``, and sends
``("result", {...})``.  Any failure is sent as ``("error", text)``.

The per-message work is the same kind for every target and kept to the
least: publishers stamp and send pre-built buffers (wire.py), subscribers
count with C-level scans (scanning.py) and decode only sampled stamps.
"""
from __future__ import annotations

import abc
import array
import os
import select
import signal
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection

from fyrehose.backbone.host.udp import SOCKET_BUFFER
from fyrehose.drivers.backbone_io import keepalive_handshake, open_socket
from fyrehose.net.sockets import enlarge_buffers
from fyrehose.protocol import codec
from fyrehose.protocol.codec import Address
from fyrehose.protocol.connection import BackboneConnection, ConnectionOptions
from fyrehose.tools.bench import wire
from fyrehose.tools.bench.offer_schedule import OfferSchedule
from fyrehose.tools.bench.recovery import HoleRecovery
from fyrehose.tools.bench.scanning import (
    DeliverScanner,
    NatsStream,
    RespStream,
    RespValue,
    StreamError,
    parse_resp,
    resp_reply_error,
)
from fyrehose.tools.bench.targets import FYREHOSE, NATS, REDIS

HANDSHAKE_TIMEOUT = 10.0
START_TIMEOUT = 60.0
IDLE_WAIT = 0.05
TCP_READ = 1 << 20
MAX_SAMPLES = 1_000_000  # latency samples kept per subscriber
DELIVER = bytes([codec.DELIVER])


@dataclass(frozen=True)
class LoadSpec:
    protocol: str
    address: Address
    payload_size: int
    rate: float | None = None  # publishers: messages/s this one offers; None = as fast as it can
    batch: bool = True  # fyrehose subscribers: set the BATCH flag
    drop_every: int = 0  # fyrehose subscribers: discard one DELIVER datagram in N as if lost, to open holes


def _await_start(conn: Connection, idle=lambda now: None) -> tuple[float, float, float] | None:
    deadline = time.monotonic() + START_TIMEOUT
    while not conn.poll(0.1):
        now = time.monotonic()
        if now > deadline:
            return None
        idle(now)
    message = conn.recv()
    return message[1:] if message[0] == "start" else None


def _describe(exc: BaseException) -> str:
    return str(exc) if isinstance(exc, StreamError) else f"{type(exc).__name__}: {exc}"


# ---------------------------------------------------------------- publishers


class _Sender(abc.ABC):
    sock: socket.socket  # each kind opens its own in its constructor

    def __init__(self, spec: LoadSpec, batch: wire.Batch) -> None:
        self.spec = spec
        self.batch = batch

    @abc.abstractmethod
    def send(self, count: int) -> None:
        """Send the first ``count`` messages of the batch, the first one stamped now."""

    def close(self) -> None:
        sock = getattr(self, "sock", None)  # a constructor that failed may not have opened it
        if sock is not None:
            sock.close()


class _FyrehoseSender(_Sender):
    def __init__(self, spec: LoadSpec, batch: wire.Batch) -> None:
        super().__init__(spec, batch)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        enlarge_buffers(self.sock, SOCKET_BUFFER)
        self.sock.connect(spec.address)  # a connected socket: no address to resolve per send
        self._send = self.sock.send

    def send(self, count: int) -> None:
        self._send(self.batch.stamped(count, time.monotonic_ns()))


class _TcpSender(_Sender):
    def __init__(self, spec: LoadSpec, batch: wire.Batch) -> None:
        super().__init__(spec, batch)
        self.sock = socket.create_connection(spec.address, timeout=HANDSHAKE_TIMEOUT)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        enlarge_buffers(self.sock, SOCKET_BUFFER)
        self.handshake()
        self.sock.settimeout(None)
        self._sendall = self.sock.sendall

    @abc.abstractmethod
    def handshake(self) -> None:
        """Connect at the protocol level and wait until the server answered."""

    @abc.abstractmethod
    def replies(self, chunk: bytes) -> None:
        """Deal with what the server sent back to a publisher."""

    def send(self, count: int) -> None:
        self._sendall(self.batch.stamped(count, time.monotonic_ns()))
        while True:  # drain replies without waiting, so the server never buffers them for us
            try:
                chunk = self.sock.recv(TCP_READ, socket.MSG_DONTWAIT)
            except BlockingIOError:
                return
            if not chunk:
                raise StreamError("the server closed the publisher's connection")
            self.replies(chunk)


class _RespSender(_TcpSender):
    def handshake(self) -> None:
        answer = resp_request(self.sock, wire.resp_command(b"PING"))
        if answer != b"PONG":
            raise StreamError(f"Redis answered PING with {answer!r}")

    def replies(self, chunk: bytes) -> None:
        error = resp_reply_error(chunk)
        if error is not None:
            raise StreamError(f"Redis replied with an error: {error}")


class _NatsSender(_TcpSender):
    def handshake(self) -> None:
        self._stream = NatsStream(self.spec.payload_size)
        self.sock.sendall(wire.NATS_CONNECT + wire.NATS_PING)
        while not self._stream.pongs:
            self.replies(read_chunk(self.sock))

    def replies(self, chunk: bytes) -> None:
        self._stream.feed(chunk)
        if self._stream.pings:
            self.sock.sendall(wire.NATS_PONG * self._stream.pings)
            self._stream.pings = 0


def read_chunk(sock: socket.socket) -> bytes:
    chunk = sock.recv(TCP_READ)
    if not chunk:
        raise StreamError("the server closed the connection")
    return chunk


def resp_request(sock: socket.socket, command: bytes) -> RespValue:
    """Send one command on a blocking socket and return its reply."""
    sock.sendall(command)
    buf = bytearray()
    while (parsed := parse_resp(buf)) is None:
        buf += read_chunk(sock)
    return parsed[0]


_SENDERS = {
    FYREHOSE: (_FyrehoseSender, wire.push_batch),
    REDIS: (_RespSender, wire.resp_publish_batch),
    NATS: (_NatsSender, wire.nats_pub_batch),
}


def publish(sender: _Sender, schedule: OfferSchedule, end: float) -> int:
    """Send on ``schedule`` until ``end``; return how many messages went out."""
    monotonic = time.monotonic
    sleep = time.sleep
    due = schedule.due
    while True:
        now = monotonic()
        if now >= end:
            return schedule.sent
        count = due(now)
        if count:
            sender.send(count)
            schedule.record(count, now)
        else:
            sleep(min(schedule.wait(now), end - now))


def _leave_interrupts_to_the_orchestrator() -> None:
    """Ctrl-C reaches the whole process group; the orchestrator alone handles it and stops us by PID."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def publisher_main(conn: Connection, spec: LoadSpec) -> None:
    _leave_interrupts_to_the_orchestrator()
    sender = None
    try:
        kind, build = _SENDERS[spec.protocol]
        sender = kind(spec, build(spec.payload_size, wire.messages_per_send(spec.payload_size)))
        conn.send(("ready", os.getpid()))
        times = _await_start(conn)
        if times is None:
            return
        start, end, _ = times
        time.sleep(max(0.0, start - time.monotonic()))
        schedule = OfferSchedule(spec.rate, start, sender.batch.capacity)
        conn.send(("result", {"sent": publish(sender, schedule, end)}))
    except Exception as exc:  # reported to the orchestrator, which ends the run with it
        conn.send(("error", _describe(exc)))
    finally:
        if sender is not None:
            sender.close()
        conn.close()


# ---------------------------------------------------------------- subscribers


class _Receiver(abc.ABC):
    read_size = TCP_READ

    sock: socket.socket  # each kind opens its own in its constructor

    def __init__(self, spec: LoadSpec) -> None:
        self.spec = spec

    @abc.abstractmethod
    def feed(self, data: bytes) -> tuple[int, list[int]]:
        """Count the messages in what was just read; return (count, stamps of samples)."""

    def read(self) -> bytes | None:
        """What the next read of the socket holds for :meth:`feed`; None for a datagram that is not a delivery.

        BlockingIOError when nothing waits; b"" when a stream's server closed it.
        """
        return self.sock.recv(self.read_size)

    def tick(self, now: float) -> None:  # noqa: B027 (a hook: most receivers have no periodic duty)
        """Periodic duties while waiting or receiving (KEEPALIVEs)."""

    def anomalies(self) -> dict[str, int]:
        """Counts of what arrived but could not count as a message (a TCP stream has none: it raises)."""
        return {}

    def recoveries(self) -> list[float]:
        """Seconds from noticing each hole to filling it (a TCP stream has no holes)."""
        return []

    def close(self) -> None:
        sock = getattr(self, "sock", None)  # a constructor that failed may not have opened it
        if sock is not None:
            sock.close()


class _FyrehoseReceiver(_Receiver):
    read_size = 65536

    def __init__(self, spec: LoadSpec) -> None:
        super().__init__(spec)
        self.scanner = DeliverScanner(spec.payload_size)
        flags = codec.FLAG_NOJOURNAL | codec.FLAG_REDELIVERING | (codec.FLAG_BATCH if spec.batch else 0)
        if spec.drop_every:  # it must notice a dropped last datagram too, as a Client does: by the HEAD in its ACKs
            flags |= codec.FLAG_HEAD
        # the client's protocol state for KEEPALIVEs, their ACKs and the REQUESTs of holes; DELIVERs are
        # counted by the scanner, and ordered only as far as noticing and timing holes needs (HoleRecovery)
        self.connection = BackboneConnection(spec.address, ConnectionOptions(flags=flags))
        self.recovery = HoleRecovery(self.connection.track())
        self._delivers = 0
        self.sock = open_socket(spec.address, receive_buffer=SOCKET_BUFFER, send_buffer=True)
        self._subscribe(self.sock)

    def _subscribe(self, sock: socket.socket) -> None:
        if not keepalive_handshake(sock, self.connection, HANDSHAKE_TIMEOUT, every=0.2):
            host, port = self.spec.address
            raise StreamError(f"the backbone at {host}:{port} did not answer a KEEPALIVE")

    def tick(self, now: float) -> None:
        datagrams, _ = self.connection.handle_timers(now)
        for datagram in datagrams:
            self.sock.sendto(datagram, self.spec.address)

    def read(self) -> bytes | None:
        """The backbone's DELIVERs for the scanner; anything else goes through the connection (ACKs) or is counted."""
        data, source = self.sock.recvfrom(self.read_size)
        if data[:1] == DELIVER and source != self.spec.address:
            self.recovery.take_peer(data, time.monotonic)  # a journal answering a REQUEST FORWARDed to it
            return None
        if source == self.spec.address and data[:1] == DELIVER:
            self._delivers += 1
            if self.spec.drop_every and not self._delivers % self.spec.drop_every:
                return None  # lost on purpose (--drop-every): a hole to recover
            if self.recovery.take(data, time.monotonic):  # an answer to a REQUEST: recovered, not counted
                return None
            return data
        self.connection.receive(data, source, time.monotonic())  # ACKs; a stranger's datagram is dropped, counted
        return None

    def feed(self, data: bytes) -> tuple[int, list[int]]:
        return self.scanner.scan(data)

    def anomalies(self) -> dict[str, int]:
        scanner = self.scanner
        dropped = self.recovery.strangers + sum(
            count for reason, count in self.connection.stats.items() if "stranger" in reason)
        return {"malformed datagrams": scanner.malformed, "duplicate frames": scanner.duplicates,
                "untracked frames": scanner.untracked, "datagrams from strangers": dropped,
                "REQUESTs": self.connection.stats["requests"], "recovered frames": self.recovery.recovered}

    def recoveries(self) -> list[float]:
        return list(self.recovery.tracker.recoveries)


class _TcpReceiver(_Receiver):
    def __init__(self, spec: LoadSpec) -> None:
        super().__init__(spec)
        self.sock = socket.create_connection(spec.address, timeout=HANDSHAKE_TIMEOUT)
        enlarge_buffers(self.sock, SOCKET_BUFFER)
        self.stream = self.make_stream(spec.payload_size)
        self.sock.sendall(self.subscribe_bytes())
        while not self.subscribed():
            self.feed(read_chunk(self.sock))

    @abc.abstractmethod
    def make_stream(self, payload_size: int) -> RespStream | NatsStream:
        """The scanner of this protocol's subscriber stream."""

    @abc.abstractmethod
    def subscribe_bytes(self) -> bytes:
        """What to send to subscribe."""

    @abc.abstractmethod
    def subscribed(self) -> bool:
        """Whether the server has confirmed the subscription."""

    def feed(self, data: bytes) -> tuple[int, list[int]]:
        return self.stream.feed(data)


class _RespReceiver(_TcpReceiver):
    stream: RespStream

    def make_stream(self, payload_size: int) -> RespStream:
        return RespStream(payload_size)

    def subscribe_bytes(self) -> bytes:
        return wire.resp_command(b"SUBSCRIBE", wire.CHANNEL)

    def subscribed(self) -> bool:
        return self.stream.subscribed > 0


class _NatsReceiver(_TcpReceiver):
    stream: NatsStream

    def make_stream(self, payload_size: int) -> NatsStream:
        return NatsStream(payload_size)

    def subscribe_bytes(self) -> bytes:
        # The PING's PONG proves the SUB before it was processed.
        return wire.NATS_CONNECT + wire.nats_sub() + wire.NATS_PING

    def subscribed(self) -> bool:
        return self.stream.pongs > 0

    def feed(self, data: bytes) -> tuple[int, list[int]]:
        counted = self.stream.feed(data)
        if self.stream.pings:
            self.sock.sendall(wire.NATS_PONG * self.stream.pings)
            self.stream.pings = 0
        return counted


_RECEIVERS = {FYREHOSE: _FyrehoseReceiver, REDIS: _RespReceiver, NATS: _NatsReceiver}


def receive(receiver: _Receiver, deadline: float) -> tuple[int, array.array]:
    """Count messages until ``deadline``; return the count and the latencies (ns) of the samples."""
    sock = receiver.sock
    sock.setblocking(False)
    read = receiver.read
    feed = receiver.feed
    tick = receiver.tick
    monotonic = time.monotonic
    monotonic_ns = time.monotonic_ns
    latencies = array.array("q")
    count = 0
    while True:
        try:
            data = read()
        except BlockingIOError:
            now = monotonic()
            if now >= deadline:
                break
            tick(now)
            select.select((sock,), (), (), min(IDLE_WAIT, deadline - now))
            continue
        if data is not None:  # None: taken by the connection (an ACK, a re-delivery, a datagram dropped on purpose)
            if not data:
                raise StreamError("the server closed the connection")
            got, stamps = feed(data)
            count += got
            if stamps and len(latencies) < MAX_SAMPLES:
                arrived = monotonic_ns()
                latencies.extend(arrived - stamp for stamp in stamps)
        now = monotonic()
        if now >= deadline:
            break
        tick(now)
    return count, latencies


def subscriber_main(conn: Connection, spec: LoadSpec,
                    receiver_class: Callable[[LoadSpec], _Receiver] | None = None) -> None:
    """``receiver_class``: another way to receive ``spec.protocol`` (the multicast bench's group receiver)."""
    _leave_interrupts_to_the_orchestrator()
    receiver = None
    try:
        receiver = (receiver_class or _RECEIVERS[spec.protocol])(spec)
        conn.send(("ready", os.getpid()))
        times = _await_start(conn, receiver.tick)
        if times is None:
            return
        count, latencies = receive(receiver, times[2])
        conn.send(("result", {"received": count, "latencies": latencies.tobytes(),
                              "anomalies": receiver.anomalies(), "recoveries": receiver.recoveries()}))
    except Exception as exc:  # reported to the orchestrator, which ends the run with it
        conn.send(("error", _describe(exc)))
    finally:
        if receiver is not None:
            receiver.close()
        conn.close()
