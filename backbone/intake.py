"""Reading control datagrams (KEEPALIVE, REQUEST) and the address policy: pure, shared by every driver.

The single-process core and the multi-process receive workers both call
:func:`read_control`, so a datagram is accepted, or dropped for the same
reason, whichever process reads it.  The result carries resolved addresses
only: the stateful part (client table, journaler choice) stays with whoever
owns that state.
"""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from fyrehose.protocol import codec
from fyrehose.protocol.codec import Address


@dataclass(frozen=True, slots=True)
class KeepaliveIn:
    """An accepted KEEPALIVE: ``client`` is where DELIVERs go, the ACK goes to the packet's source."""

    client: Address
    flags: int
    token: bytes


@dataclass(frozen=True, slots=True)
class RequestIn:
    """An accepted REQUEST: ``requester`` is where the chosen journaler re-DELIVERs to."""

    requester: Address
    from_seq: int
    to_seq: int


class AddressPolicy:
    """ "0.0.0.0 / port 0 mean the source", and refusal of foreign addresses from untrusted sources.

    Naming another host would let anyone aim DELIVERs or re-DELIVERs at a third
    party, so only sources inside ``trusted_networks`` may do it.  Verdicts per
    source IP are cached (bounded) because every KEEPALIVE asks.
    """

    def __init__(self, trusted_networks: tuple[ipaddress.IPv4Network, ...] = ()) -> None:
        self.trusted_networks = trusted_networks
        self._verdicts: dict[str, bool] = {}

    def resolve(self, addr: str, port: int, source: Address) -> Address | None:
        """The address a frame names, or None when it names a foreign host the source may not name."""
        host = source[0] if addr == "0.0.0.0" else addr
        if host != source[0] and not self.trusted(source[0]):
            return None
        return host, port or source[1]

    def trusted(self, host: str) -> bool:
        known = self._verdicts.get(host)
        if known is None:
            ip = ipaddress.IPv4Address(host)
            known = any(ip in net for net in self.trusted_networks)
            if len(self._verdicts) > 4096:
                self._verdicts.clear()
            self._verdicts[host] = known
        return known


def read_control(datagram: bytes | bytearray | memoryview, source: Address,
                 policy: AddressPolicy) -> KeepaliveIn | RequestIn | str:
    """Classify a datagram that is not a PUSH: an accepted frame, or the reason to drop it.

    Reasons are the metrics labels: ``malformed``, ``oversize``, ``unexpected type``
    (frames that only travel away from the backbone) and ``foreign address``.
    """
    if not datagram:
        return "malformed"
    if len(datagram) > codec.MAX_DATAGRAM:
        return "oversize"
    try:
        frame = codec.decode(bytes(datagram))[0]
    except codec.ProtocolError:
        return "malformed"
    if isinstance(frame, codec.Keepalive):
        client = policy.resolve(frame.addr, frame.port, source)
        if client is None:
            return "foreign address"
        return KeepaliveIn(client, frame.flags, frame.token)
    if isinstance(frame, codec.Request):
        requester = policy.resolve(frame.addr, frame.port, source)
        if requester is None:
            return "foreign address"
        return RequestIn(requester, frame.from_seq, frame.to_seq)
    return "unexpected type"
