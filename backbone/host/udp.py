"""UDP socket set-up and sending shared by the backbone drivers."""
from __future__ import annotations

import errno
import select
import socket
from collections import Counter

from fyrehose.net.sockets import enlarge_buffers
from fyrehose.protocol.codec import Address

SOCKET_BUFFER = 32 * 1024 * 1024
_RETRYABLE = (errno.EAGAIN, errno.ENOBUFS)


IP_FREEBIND = getattr(socket, "IP_FREEBIND", 15)  # Linux; the constant is missing from some Pythons


def bind_udp(addr: Address, reuse_port: bool = False, buffer_size: int = SOCKET_BUFFER,
             freebind: bool = False) -> socket.socket:
    """``freebind``: bind an address this host does not hold yet (a pair member's service address, which VRRP
    brings when it takes over); datagrams to it arrive once the address does."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    if freebind:
        sock.setsockopt(socket.IPPROTO_IP, IP_FREEBIND, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    enlarge_buffers(sock, buffer_size)
    sock.bind(addr)
    sock.setblocking(False)
    return sock


def send_all(sock: socket.socket, sends: list, counters: Counter, wait: float = 0.01) -> None:
    """Send each (datagram, address); a full send buffer is waited on briefly, then the datagram is dropped and counted."""
    sendto = sock.sendto
    for data, addr in sends:
        try:
            sendto(data, addr)
        except OSError as exc:
            if exc.errno not in _RETRYABLE:
                counters["drop:send error"] += 1
                continue
            select.select((), (sock,), (), wait)
            try:
                sendto(data, addr)
            except OSError:
                counters["drop:send buffer full"] += 1
