"""sendmmsg(2) through ctypes: many datagrams to many destinations in one system call.

The standard library has ``socket.sendmsg`` (one datagram per call) but no
sendmmsg.  A fan-out worker sends the same datagram to each of its
subscribers, so it describes the datagram once as an iovec (slices of the
shared-memory log, no copy) and queues one message header per destination.
The header and iovec arrays are allocated once and reused.  Linux only; the
call blocks the calling thread (never use it under gevent).
"""
from __future__ import annotations

import ctypes
import errno
import select
import socket
import struct
from collections import Counter

from fyrehose.protocol.codec import Address

MAX_IOV = 1024  # UIO_MAXIOV: iovecs per datagram the kernel accepts
_MSGHDR = struct.Struct("PI4xPQPQi4xI4x")  # struct mmsghdr on LP64: msghdr + msg_len
_IOVEC = struct.Struct("PQ")
_SOCKADDR_IN = struct.Struct("=H2s4s8x")  # family (host order), port and address (network order)
_RETRYABLE = (errno.EAGAIN, errno.ENOBUFS)

_libc = ctypes.CDLL(None, use_errno=True)
_sendmmsg = _libc.sendmmsg
_sendmmsg.argtypes = (ctypes.c_int, ctypes.c_void_p, ctypes.c_uint, ctypes.c_int)
_sendmmsg.restype = ctypes.c_int


class Sender:
    """Queues (destination, iovec) messages and sends them with as few sendmmsg calls as possible.

    Everything an iovec points at must stay unchanged until :meth:`flush`
    returns.  A message the kernel refuses is dropped and counted in
    ``counters`` (``drop:send error``, or ``drop:send buffer full`` after a
    short wait for room), like the single-process driver's ``send_all``.
    """

    def __init__(self, sock: socket.socket, counters: Counter, messages: int = 1024,
                 iovecs: int = 8192, wait: float = 0.01) -> None:
        self._sock = sock
        self._fd = sock.fileno()
        self._counters = counters
        self._wait = wait
        self._capacity = messages
        self._iov_capacity = iovecs
        self._headers = ctypes.create_string_buffer(messages * _MSGHDR.size)
        self._headers_at = ctypes.addressof(self._headers)
        self._iovecs = ctypes.create_string_buffer(iovecs * _IOVEC.size)
        self._iovecs_at = ctypes.addressof(self._iovecs)
        self._names: dict[Address, ctypes.Array] = {}
        self._held: list[ctypes.Array] = []  # copies that pending messages point at
        self.pending = 0
        self._iov_used = 0
        self.sent = 0

    def destination(self, addr: Address) -> int:
        """The address of a sockaddr_in for ``addr`` (cached; pass it to :meth:`add`)."""
        name = self._names.get(addr)
        if name is None:
            raw = _SOCKADDR_IN.pack(socket.AF_INET, addr[1].to_bytes(2, "big"), socket.inet_aton(addr[0]))
            name = self._names[addr] = ctypes.create_string_buffer(raw, len(raw))
        return ctypes.addressof(name)

    def forget_destinations(self) -> None:
        """Free every cached sockaddr; only when no queued message and no kept address uses them."""
        self._names.clear()

    @property
    def destinations(self) -> int:
        return len(self._names)

    def iovec(self, parts: list[tuple[int, int]]) -> tuple[int, int]:
        """Describe one datagram made of (address, length) parts; returns (iovec address, count)."""
        if len(parts) > MAX_IOV:
            joined = b"".join(ctypes.string_at(at, length) for at, length in parts)
            copy = ctypes.create_string_buffer(joined, len(joined))
            self._held.append(copy)
            parts = [(ctypes.addressof(copy), len(joined))]
        if self._iov_used + len(parts) > self._iov_capacity:
            self.flush()
        first = self._iov_used
        pack = _IOVEC.pack_into
        buf = self._iovecs
        offset = first * _IOVEC.size
        for at, length in parts:
            pack(buf, offset, at, length)
            offset += _IOVEC.size
        self._iov_used = first + len(parts)
        return self._iovecs_at + first * _IOVEC.size, len(parts)

    def add(self, destination: int, iovec: tuple[int, int]) -> None:
        """Queue the datagram ``iovec`` for ``destination``; sends when the header array is full."""
        if self.pending == self._capacity:
            self._send_pending()
        _MSGHDR.pack_into(self._headers, self.pending * _MSGHDR.size,
                          destination, _SOCKADDR_IN.size, iovec[0], iovec[1], 0, 0, 0, 0)
        self.pending += 1

    def flush(self) -> None:
        """Send everything queued; afterwards the memory iovecs pointed at may change."""
        self._send_pending()
        self._iov_used = 0
        self._held.clear()

    def _send_pending(self) -> None:
        done = 0
        total = self.pending
        retried = False
        while done < total:
            sent = _sendmmsg(self._fd, self._headers_at + done * _MSGHDR.size, total - done, 0)
            if sent > 0:
                done += sent
                self.sent += sent
                retried = False
                continue
            code = ctypes.get_errno()
            if code == errno.EINTR:
                continue
            if code in _RETRYABLE and not retried:
                select.select((), (self._sock,), (), self._wait)
                retried = True
                continue
            self._counters["drop:send buffer full" if code in _RETRYABLE else "drop:send error"] += 1
            done += 1  # give up on that one message, go on with the rest
            retried = False
        self.pending = 0
