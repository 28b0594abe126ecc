"""Reading control datagrams (KEEPALIVE, REQUEST) and the address policy: pure, shared by every driver.

The single-process core and the multi-process receive workers both call
:func:`read_control`, so a datagram is accepted, or dropped for the same
reason, whichever process reads it.  The result carries resolved addresses
only: the stateful part (client table, journaler choice) stays with whoever
owns that state.  With address validation (a :class:`~fyrehose.backbone.cookies.CookieJar`
in the policy) a KEEPALIVE from outside the trusted networks is accepted only
with a cookie that verifies; otherwise the result is the COOKIE answer to send,
or the reason for sending none.
"""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from fyrehose.backbone.cookies import CookieJar
from fyrehose.protocol import codec
from fyrehose.protocol.codec import Address


@dataclass(frozen=True, slots=True)
class KeepaliveIn:
    """An accepted KEEPALIVE: ``client`` is where DELIVERs go, the ACK goes to the packet's source."""

    client: Address
    flags: int
    token: bytes
    renew: bool = False  # its cookie is of the previous slot: the ACK carries a fresh one


@dataclass(frozen=True, slots=True)
class CookieAnswer:
    """A KEEPALIVE from an address not validated yet: ``frame`` (a COOKIE) goes to ``client``, nothing else.

    ``forged`` when the KEEPALIVE carried a cookie that does not verify.
    """

    frame: bytes
    client: Address
    forged: bool


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

    def __init__(self, trusted_networks: tuple[ipaddress.IPv4Network, ...] = (),
                 cookies: CookieJar | None = None) -> None:
        self.trusted_networks = trusted_networks
        self.cookies = cookies  # address validation (--validate-addresses): untrusted sources must echo a cookie
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


def read_control(datagram: bytes | bytearray | memoryview, source: Address, policy: AddressPolicy,
                 now: float = 0.0) -> KeepaliveIn | RequestIn | CookieAnswer | str:
    """Classify a datagram that is not a PUSH: an accepted frame, a COOKIE answer, or the reason to drop it.

    Reasons are the metrics labels: ``malformed``, ``oversize``, ``unexpected type``
    (frames that only travel away from the backbone), ``foreign address`` and, with
    address validation, ``unvalidated address`` (a KEEPALIVE that may not be
    answered now: a legacy one, which cannot echo a cookie, or one whose address
    had its COOKIE answer in this slot already) and ``bad cookie`` (the same, for a
    KEEPALIVE whose cookie does not verify).  ``now`` is the cookies' clock.
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
        cookies = policy.cookies
        if cookies is None or policy.trusted(source[0]):
            return KeepaliveIn(client, frame.flags, frame.token)
        age = cookies.check(frame.cookie, client, now) if frame.cookie else None
        if age is not None:
            return KeepaliveIn(client, frame.flags, frame.token, age > 0)
        answer = None if frame.legacy else cookies.answer(client, now)
        if answer is None:
            return "bad cookie" if frame.cookie else "unvalidated address"
        return CookieAnswer(answer, client, bool(frame.cookie))
    if isinstance(frame, codec.Request):
        requester = policy.resolve(frame.addr, frame.port, source)
        if requester is None:
            return "foreign address"
        return RequestIn(requester, frame.from_seq, frame.to_seq)
    return "unexpected type"
