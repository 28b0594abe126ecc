"""Raw TCP subscribers of the Redis, NATS and Marlin gateways: the bytes a real client would read.

Used by the endpoint fuzzer and the gateway tests to see exactly what a
gateway sends its clients, with no client library in between.
"""
from __future__ import annotations

import selectors
import socket

from fyrehose.protocol.codec import Address


def raw_subscriber(kind: str, address: Address, channel: bytes, receive_buffer: int | None = None) -> socket.socket:
    """A raw client subscribed to ``channel`` (optionally with a small receive buffer)."""
    sock = socket.socket()
    if receive_buffer:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
    sock.connect(address)
    if kind == "redis":
        sock.sendall(b"*2\r\n$9\r\nSUBSCRIBE\r\n$%d\r\n%s\r\n" % (len(channel), channel))
    elif kind == "nats":
        sock.sendall(b"CONNECT {}\r\nSUB %s 1\r\nPING\r\n" % channel)
    else:
        sock.sendall(b"\x00\x00\x00%c\x00\x00%s" % (len(channel) + 2, channel))
    return sock


def drain(sock: socket.socket, wait: float = 0.0) -> bytes:
    """Whatever ``sock`` holds now (waiting up to ``wait`` s for the first byte); b"" at end of stream."""
    out = b""
    with selectors.DefaultSelector() as selector:
        selector.register(sock, selectors.EVENT_READ)
        timeout = wait
        while selector.select(timeout):
            chunk = sock.recv(1 << 20)
            if not chunk:
                break
            out += chunk
            timeout = 0
    return out
