"""Whether one backbone message can carry what a gateway client publishes."""
from __future__ import annotations

from fyrehose.protocol.codec import MAX_PAYLOAD, PayloadTooLarge
from fyrehose.subjects import envelope
from fyrehose.subjects.envelope import Envelope


def checked(message: Envelope) -> Envelope:
    """``message`` if one backbone message can carry it, else PayloadTooLarge (or EnvelopeError).

    Checked one by one before publishing, so that an oversized message is
    refused alone instead of failing the batch of confirmed publishes it would
    have joined.
    """
    size = len(envelope.encode(message))
    if size > MAX_PAYLOAD:
        raise PayloadTooLarge(size)
    return message
