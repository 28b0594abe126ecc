"""Whether one backbone message can carry what a gateway client publishes."""
from __future__ import annotations

from fyrehose.protocol.codec import MAX_PAYLOAD, PayloadTooLarge
from fyrehose.subjects.envelope import FIXED_SIZE, Envelope


def checked(message: Envelope) -> Envelope:
    """``message`` if one backbone message can carry it, else PayloadTooLarge.

    Checked one by one before publishing, so that an oversized message is
    refused alone instead of failing the batch of confirmed publishes it would
    have joined.  The size is the encoded envelope's, counted without encoding
    it (the router encodes it once, when it seals it): a connection's message
    has a valid subject and no session or digest yet.
    """
    size = FIXED_SIZE + len(message.subject.encode()) + len(message.data)
    if message.reply is not None:
        size += 2 + len(message.reply.encode())
    if message.headers is not None:
        size += 4 + len(message.headers)
    if size > MAX_PAYLOAD:
        raise PayloadTooLarge(size)
    return message
