"""Parsing of HOST:PORT arguments, multicast groups and trusted-network lists, shared by every command."""
from __future__ import annotations

import argparse
import ipaddress
import socket

from fyrehose.errors import InputError
from fyrehose.protocol.codec import Address

DEFAULT_BACKBONE = "127.0.0.1:2323"
ADMIN_SCOPED = ipaddress.IPv4Network("239.0.0.0/8")  # RFC 2365: organisation-local groups


def parse_hostport(text: str, default_port: int | None = None) -> Address:
    """Parse ``HOST:PORT`` (or ``HOST`` when a default port is given) into an IPv4 literal and a port.

    The host is resolved once here, because sendto with a hostname costs a
    lookup on every call.
    """
    host, sep, port_text = text.rpartition(":")
    if not sep:
        if default_port is None:
            raise InputError(f"expected HOST:PORT, got {text!r}")
        host, port_text = text, str(default_port)
    if not host:
        raise InputError(f"missing host in {text!r}")
    try:
        port = int(port_text)
    except ValueError:
        raise InputError(f"port {port_text!r} in {text!r} is not a number") from None
    if not 0 <= port <= 65535:
        raise InputError(f"port {port} in {text!r} is outside 0..65535")
    return resolve_ipv4(host), port


def resolve_ipv4(host: str) -> str:
    try:
        return str(ipaddress.IPv4Address(host))
    except ValueError:
        pass
    try:
        address = socket.getaddrinfo(host, None, socket.AF_INET, socket.SOCK_DGRAM)[0][4][0]
    except socket.gaierror as exc:
        raise InputError(f"cannot resolve host {host!r}: {exc.strerror}") from None
    assert isinstance(address, str)  # an AF_INET sockaddr is (host, port)
    return address


def parse_networks(texts: list[str]) -> tuple[ipaddress.IPv4Network, ...]:
    """Parse CIDR strings such as ``10.0.0.0/8`` (a bare address means that one host)."""
    networks = []
    for text in texts:
        try:
            networks.append(ipaddress.IPv4Network(text, strict=False))
        except ValueError:
            raise InputError(f"{text!r} is not an IPv4 network (CIDR)") from None
    return tuple(networks)


def route_source(destination: Address) -> str:
    """The local IPv4 address the kernel would send from to reach ``destination``.

    A client binds it rather than 0.0.0.0 so that its port is reachable only
    where its backbone is: a client of a loopback backbone listens on
    127.0.0.1 alone.  Connecting a UDP socket sends nothing; it only routes.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(destination)
        except OSError:
            return "0.0.0.0"  # no route yet: the KEEPALIVEs will tell the user the backbone is unreachable
        return probe.getsockname()[0]


def parse_bind(text: str) -> Address:
    """``HOST`` or ``HOST:PORT`` for a client's local address (port 0: any)."""
    try:
        return parse_hostport(text, 0)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_backbone_arguments(parser: argparse.ArgumentParser) -> None:
    """``--backbone`` and ``--bind``, for every command that is a client of the backbone."""
    parser.add_argument("--backbone", default=DEFAULT_BACKBONE, metavar="HOST:PORT",
                        help=f"the backbone (default {DEFAULT_BACKBONE})")
    add_bind_argument(parser)


def add_bind_argument(parser: argparse.ArgumentParser) -> None:
    """``--bind``, for every command whose backbone client listens for DELIVERs."""
    parser.add_argument("--bind", type=parse_bind, default=None, metavar="HOST[:PORT]",
                        help="local address for the backbone client's UDP socket (default: the address that "
                             "routes to the backbone, e.g. 127.0.0.1 for a loopback backbone)")


def parse_group(text: str) -> Address:
    """``GROUP:PORT`` of an IPv4 multicast group (224.0.0.0/4, not the link-local 224.0.0.0/24), a real port."""
    host, port = parse_hostport(text)
    address = ipaddress.IPv4Address(host)
    if not address.is_multicast:
        raise InputError(f"{host} in {text!r} is not an IPv4 multicast group (224.0.0.0/4; "
                         f"use one in {ADMIN_SCOPED} on a LAN)")
    if address in ipaddress.IPv4Network("224.0.0.0/24"):
        raise InputError(f"{host} in {text!r} is reserved for link-local protocols; use one in {ADMIN_SCOPED}")
    if port == 0:
        raise InputError(f"the multicast group {text!r} needs a port other than 0")
    return host, port


def add_multicast_argument(parser: argparse.ArgumentParser) -> None:
    """``--multicast GROUP:PORT``, for every command whose backbone client takes DELIVERs."""
    parser.add_argument("--multicast", type=_group_argument, default=None, metavar="GROUP:PORT",
                        help="take DELIVERs from the backbone's multicast group (its --multicast), joined on the "
                             "interface that routes to the backbone; falls back to unicast by itself when the "
                             "group brings nothing (docs/operations.md, Multicast)")


def _group_argument(text: str) -> Address:
    try:
        return parse_group(text)
    except InputError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
