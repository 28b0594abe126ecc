"""fyrehose: a sequenced pub/sub backbone over UDP.  ``from fyrehose import Client`` is all a script needs."""
from fyrehose.client import (
    BackboneUnreachable,
    Client,
    FyrehoseError,
    MessagesLost,
    PublishTimeout,
    Subscription,
)
from fyrehose.codec import MAX_PAYLOAD, PayloadTooLarge, ProtocolError
from fyrehose.tracker import Lost, Message

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
