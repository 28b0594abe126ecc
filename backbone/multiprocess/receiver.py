"""A receive worker: reads its SO_REUSEPORT socket, checks every datagram, and passes the good ones on.

It classifies with the same pure functions as the single-process core, drops
and counts what is bad, and copies what is good into its ring to the
sequencer: a PUSH datagram's well-formed frames as they are, a KEEPALIVE or
REQUEST with its addresses resolved.  A full ring drops the datagram and
counts it (``ring full``); the socket is never left unread for the ring's sake.

With several receive workers each record carries the kernel's arrival time
(SO_TIMESTAMPNS), and the worker keeps two words for the sequencer, which
merges the rings in arrival order (see :mod:`fyrehose.backbone.multiprocess.sequencer`):
a busy flag, raised while it holds datagrams that are not in its ring yet,
and a watermark, a time before which every datagram of its socket is in the
ring (the arrival of the last one it passed on, or, when it found the socket
empty, the moment just before it looked).

With ``--validate-addresses`` the worker checks the cookie of every KEEPALIVE
(:func:`fyrehose.backbone.intake.read_control`) and sends the COOKIE answer to
an address not validated yet itself, from its socket (the backbone's address):
such a KEEPALIVE never reaches the sequencer.  Each worker rations its own
COOKIEs (one per address and slot): the kernel hands one source address and
port always to the same worker, but a forger who varies the source port of
packets naming one address can reach every worker, so that address gets at
most R COOKIEs per slot (docs/protocol.md, "Address validation").

With ``--rate-limit`` each worker keeps its own per-source buckets and drops
(``rate limited``) what a source sends beyond the rate, before the ring.  The
kernel spreads sources over the workers by address and port, so one source
port always meets one bucket; a host that spreads its ports over all R
workers can get at most R times the rate through.
"""
from __future__ import annotations

import select
import socket
import struct
import time
from collections import Counter
from collections.abc import Callable

from fyrehose.backbone.intake import AddressPolicy, CookieAnswer, read_control
from fyrehose.backbone.multiprocess import records
from fyrehose.backbone.multiprocess.rings import Doorbell, Ring
from fyrehose.backbone.multiprocess.shared import CounterBlock, Words
from fyrehose.backbone.pushes import uniform_frames
from fyrehose.backbone.ratelimit import SourceRateLimiter
from fyrehose.protocol import codec

DRAIN_LIMIT = 512
IDLE_POLL_MS = 200
SO_TIMESTAMPNS = 35  # <asm-generic/socket.h>; also the control message type (SCM_TIMESTAMPNS)
_TIMESPEC = struct.Struct("qq")
_ANCILLARY = socket.CMSG_SPACE(_TIMESPEC.size)


def enable_arrival_times(sock: socket.socket) -> None:
    sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)


def run_receiver(sock: socket.socket, ring: Ring, sequencer_bell: Doorbell, wake: Doorbell,
                 counter_block: CounterBlock, stopping: Callable[[], bool], policy: AddressPolicy,
                 busy: Words | None = None, watermarks: Words | None = None, index: int = 0,
                 limiter: SourceRateLimiter | None = None) -> None:
    """Serve until ``stopping()`` is true; everything read is in the ring or counted when this returns.

    ``busy`` and ``watermarks`` (with this worker's ``index``) are given when
    there are several receive workers: records then carry arrival times.
    ``limiter`` drops what a source sends beyond its rate.
    """
    counters: Counter = counter_block.load()
    buf = bytearray(65536)
    view = memoryview(buf)
    timed = busy is not None
    recvfrom_into = sock.recvfrom_into
    recvmsg_into = sock.recvmsg_into
    buffers = [buf]
    unpack_time = _TIMESPEC.unpack
    reserve = ring.reserve
    push_kind = codec.PUSH
    arrival = 0
    watermark = 0
    clock = time.time_ns
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    poller.register(wake.fileno(), select.POLLIN)
    while not stopping():
        poller.poll(IDLE_POLL_MS)
        if busy is not None:  # timed
            busy[index] = True
        wake.clear()
        wrote = False
        seen = 0
        now = time.monotonic()  # one refill time per drain: buckets refill between drains
        for _ in range(DRAIN_LIMIT):
            try:
                if timed:
                    looked = clock()
                    size, ancillary, _, source = recvmsg_into(buffers, _ANCILLARY)
                    for _, kind, message in ancillary:
                        if kind == SO_TIMESTAMPNS:
                            seconds, nanoseconds = unpack_time(message[:_TIMESPEC.size])
                            arrival = seconds * 1_000_000_000 + nanoseconds
                else:
                    size, source = recvfrom_into(buf)
            except BlockingIOError:
                if timed:
                    watermark = looked  # the socket was empty at that moment
                break
            except OSError:
                counters["drop:receive error"] += 1
                seen += 1
                continue
            seen += 1
            watermark = arrival
            if limiter is not None and not limiter.allow(source[0], now):
                counters["drop:rate limited"] += 1
                continue
            data = view[:size]
            if size and data[0] == push_kind:
                if not uniform_frames(data):  # frames of one size, tagged or not, need no scan
                    spans, error = codec.scan(data, push_kind)
                    if error is not None:
                        counters["drop:malformed"] += 1
                    if not spans:
                        continue
                    size = spans[-1][1]
                slot = reserve(records.SOURCE_SIZE + size)
                if slot is None:
                    counters["drop:ring full"] += 1
                    continue
                records.pack_push_header(slot, source, arrival)
                slot[records.SOURCE_SIZE:] = view[:size]
            else:
                accepted = read_control(data, source, policy, now)
                if isinstance(accepted, str):
                    counters["drop:" + accepted] += 1
                    continue
                if isinstance(accepted, CookieAnswer):
                    _send_cookie(sock, accepted, counters)
                    continue
                record = records.pack_control(accepted, source, arrival)
                slot = reserve(len(record))
                if slot is None:
                    counters["drop:ring full"] += 1
                    continue
                slot[:] = record
            wrote = True
        if seen:
            counter_block.store(counters)  # before the records are visible: an answer implies the count
        if wrote:
            ring.publish()
        if busy is not None:  # timed
            assert watermarks is not None  # given with busy
            watermarks[index] = watermark  # after publish: whoever reads it sees the records
            busy[index] = False
        if wrote or timed:  # a sequencer holding records for our sake may go on now
            sequencer_bell.ring()
    counter_block.store(counters)


def _send_cookie(sock: socket.socket, answer: CookieAnswer, counters: Counter) -> None:
    """The COOKIE answer to a KEEPALIVE from an address not validated yet, counted; a send error is counted too."""
    if answer.forged:
        counters["drop:bad cookie"] += 1
    try:
        sock.sendto(answer.frame, answer.client)
    except OSError:
        counters["drop:send error"] += 1
        return
    counters["cookies"] += 1
