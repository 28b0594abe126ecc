"""Parsing of HOST:PORT arguments and of trusted-network lists, shared by every command."""
from __future__ import annotations

import ipaddress
import socket

Address = tuple[str, int]


def parse_hostport(text: str, default_port: int | None = None) -> Address:
    """Parse ``HOST:PORT`` (or ``HOST`` when a default port is given) into an IPv4 literal and a port.

    The host is resolved once here, because sendto with a hostname costs a
    lookup on every call.
    """
    host, sep, port_text = text.rpartition(":")
    if not sep:
        if default_port is None:
            raise ValueError(f"expected HOST:PORT, got {text!r}")
        host, port_text = text, str(default_port)
    if not host:
        raise ValueError(f"missing host in {text!r}")
    try:
        port = int(port_text)
    except ValueError:
        raise ValueError(f"port {port_text!r} in {text!r} is not a number") from None
    if not 0 <= port <= 65535:
        raise ValueError(f"port {port} in {text!r} is outside 0..65535")
    return resolve_ipv4(host), port


def resolve_ipv4(host: str) -> str:
    try:
        return str(ipaddress.IPv4Address(host))
    except ValueError:
        pass
    try:
        return socket.getaddrinfo(host, None, socket.AF_INET, socket.SOCK_DGRAM)[0][4][0]
    except socket.gaierror as exc:
        raise ValueError(f"cannot resolve host {host!r}: {exc.strerror}") from None


def parse_networks(texts: list[str]) -> tuple[ipaddress.IPv4Network, ...]:
    """Parse CIDR strings such as ``10.0.0.0/8`` (a bare address means that one host)."""
    networks = []
    for text in texts:
        try:
            networks.append(ipaddress.IPv4Network(text, strict=False))
        except ValueError:
            raise ValueError(f"{text!r} is not an IPv4 network (CIDR)") from None
    return tuple(networks)
