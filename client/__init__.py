"""fyrehose: a sequenced pub/sub backbone over UDP.  ``from fyrehose import Client`` is all a script needs."""
# First, before any module of the package loads: FYREHOSE_PURE=1 runs every compiled module from its .py.
from fyrehose.runtime import compiled as _compiled

_compiled.install()

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
