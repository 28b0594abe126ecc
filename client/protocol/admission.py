"""Who may say what to a client: the first look at every datagram a client's socket receives.

A client's port is reachable by anyone who can reach its host, so what it
accepts must not depend on the sender behaving.  Only the backbone may
acknowledge, confirm or forward; a DELIVER from any other address is a
re-delivery, which the client accepts only for a hole it has REQUESTed and
not yet filled (the per-frame half of that rule lives in
:meth:`fyrehose.protocol.tracker.SequenceTracker.awaits`).  Everything else is dropped
with a reason, so that an operator sees who is probing the port and nothing a
stranger sends reaches a journal or a subscription.

Pure: bytes, addresses in; a verdict out.  The receive loop of every client
driver calls :func:`admit` before decoding anything, but for the backbone's
DELIVERs that continue the stream, which
:meth:`~fyrehose.protocol.connection.BackboneConnection.receive` recognises
first from the sender and the bytes (:func:`admit` would let them all pass).
"""
from __future__ import annotations

from typing import NamedTuple

from fyrehose.protocol import codec
from fyrehose.protocol.codec import Address

# The frame types a backbone sends to a client; anything else is not for a client.
CLIENT_BOUND = frozenset({codec.DELIVER, codec.KEEPALIVE_ACK, codec.CONFIRM, codec.FORWARD, codec.GONE, codec.COOKIE})
_BACKBONE_ONLY = frozenset({codec.KEEPALIVE_ACK, codec.CONFIRM, codec.FORWARD, codec.GONE, codec.COOKIE})


class Verdict(NamedTuple):
    """``kind`` is the frame type to handle, or 0 with ``drop`` naming the counter to increment."""

    kind: int
    from_backbone: bool
    drop: str = ""


def admit(datagram: bytes, source: Address, backbone: Address) -> Verdict:
    """Whether a datagram may be decoded at all, and as what."""
    from_backbone = source == backbone
    if not datagram:
        return Verdict(0, from_backbone, "empty datagrams")
    kind = datagram[0]
    if kind not in CLIENT_BOUND:
        return Verdict(0, from_backbone, "unknown frame types" if from_backbone else "strangers' other datagrams")
    if kind in _BACKBONE_ONLY and not from_backbone:
        return Verdict(0, False, f"{codec.frame_name(kind)} from strangers")
    return Verdict(kind, from_backbone)
