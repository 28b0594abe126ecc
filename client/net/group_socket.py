"""A client's socket on the backbone's multicast group, for any driver (threads, gevent).

Every subscriber on a host binds the group's port (SO_REUSEADDR, so each
gets its own copy); binding the group address rather than 0.0.0.0 keeps
unicast datagrams to that port out, and IP_MULTICAST_ALL off keeps out the
groups other sockets on the host joined on the same port.  The group is
joined on the interface whose address routes to the backbone: where the
backbone's datagrams come from is where its group is routed.  The socket
is non-blocking: a driver waits for it (select, poll, gevent) and drains it.
"""
from __future__ import annotations

import socket

from fyrehose.errors import CommandFailed
from fyrehose.net.addresses import route_source
from fyrehose.net.sockets import enlarge_buffers
from fyrehose.protocol.codec import Address

IP_MULTICAST_ALL = getattr(socket, "IP_MULTICAST_ALL", 49)  # Linux; the stdlib names it from 3.12 on


def join_group(group: Address, backbone: Address, buffer_size: int) -> socket.socket:
    """A socket bound to ``group`` and a member of it on the interface that routes to ``backbone``."""
    interface = route_source(backbone)
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        enlarge_buffers(sock, buffer_size, (socket.SO_RCVBUF,))
        sock.bind(group)
        membership = socket.inet_aton(group[0]) + socket.inet_aton(interface)
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, membership)
        sock.setsockopt(socket.IPPROTO_IP, IP_MULTICAST_ALL, 0)
        sock.setblocking(False)  # drivers wait for it with select or gevent, then drain it
    except OSError as exc:
        sock.close()
        raise CommandFailed(f"cannot join multicast group {group[0]}:{group[1]} on {interface}: "
                            f"{exc.strerror or exc}") from None
    return sock
