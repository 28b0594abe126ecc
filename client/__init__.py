"""fyrehose: a sequenced pub/sub backbone over UDP.  ``from fyrehose import Client`` is all a script needs."""
from fyrehose.drivers.client import (
    BackboneUnreachable,
    Client,
    FyrehoseError,
    MessagesLost,
    PublishTimeout,
    Subscription,
)
from fyrehose.protocol.codec import MAX_PAYLOAD, PayloadTooLarge, ProtocolError
from fyrehose.protocol.tracker import Lost, Message

__all__ = [
    "BackboneUnreachable",
    "Client",
    "FyrehoseError",
    "Lost",
    "MAX_PAYLOAD",
    "Message",
    "MessagesLost",
    "PayloadTooLarge",
    "ProtocolError",
    "PublishTimeout",
    "Subscription",
]
