"""The backbone's side of the multicast extension: its socket sends to the group too.

The group's datagrams leave from the backbone's own socket, so they carry the
backbone's address and port, the only source a client accepts them from
(docs/protocol.md, MULTICAST).  TTL and interface are set on that socket before any worker
starts; IP_MULTICAST_LOOP stays on so that subscribers on the backbone's own
host get the group as well.
"""
from __future__ import annotations

import socket
from dataclasses import dataclass

from fyrehose.errors import CommandFailed
from fyrehose.protocol.codec import Address

DEFAULT_TTL = 1  # one hop: the group stays on the backbone's LAN unless the operator says otherwise


@dataclass(frozen=True)
class GroupOptions:
    group: Address
    ttl: int = DEFAULT_TTL
    interface: str | None = None  # the address of the interface to send from; None: the listen address's


def send_interface(options: GroupOptions, listen: Address) -> str | None:
    """Where the group's datagrams go out: the one given, else the listen address's interface (None: the kernel's route)."""
    if options.interface is not None:
        return options.interface
    return None if listen[0] == "0.0.0.0" else listen[0]


def enable_group_sends(sock: socket.socket, options: GroupOptions) -> None:
    """Set the group's TTL and outgoing interface on the backbone's socket; a clear error if the kernel refuses."""
    interface = send_interface(options, sock.getsockname())
    try:
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, options.ttl)
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 1)
        if interface is not None:
            sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton(interface))
    except OSError as exc:
        raise CommandFailed(f"cannot send to multicast group {options.group[0]}:{options.group[1]} from "
                            f"{interface or 'the default interface'}: {exc.strerror or exc}") from None
