"""Kernel socket buffers big enough for bursts of packed datagrams, for every endpoint of the package."""
from __future__ import annotations

import socket

_FORCE = {socket.SO_RCVBUF: 33, socket.SO_SNDBUF: 32}  # SO_RCVBUFFORCE, SO_SNDBUFFORCE


def enlarge_buffers(sock: socket.socket, size: int, options: tuple[int, ...] = (socket.SO_RCVBUF, socket.SO_SNDBUF)) -> None:
    """Ask for ``size``-byte kernel buffers: bursts of 64 KiB datagrams overflow the defaults at once.

    SO_*BUFFORCE passes net.core.[rw]mem_max when the process may (root); otherwise
    the kernel caps the request at those sysctls (see docs/operations.md).
    """
    for plain in options:
        try:
            sock.setsockopt(socket.SOL_SOCKET, _FORCE[plain], size)
        except OSError:
            try:
                sock.setsockopt(socket.SOL_SOCKET, plain, size)
            except OSError:
                pass
