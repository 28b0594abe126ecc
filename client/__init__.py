"""fyrehose: a sequenced pub/sub backbone over UDP.  ``from fyrehose import Client`` is all a script needs.

Everything the README and docs/ show a script using is importable from here
(listed in ``__all__``): the client, its errors and events, envelopes with
their types and statuses, and the credentials of a signing client.  Modules
that moved keep working from their old names with a DeprecationWarning
(:mod:`fyrehose.runtime.moved`).
"""
# First, before any module of the package loads: FYREHOSE_PURE=1 runs every compiled module from its .py.
from fyrehose.runtime import compiled as _compiled

_compiled.install()

from fyrehose.runtime import moved as _moved  # noqa: E402 - after the compiled modules' finder

_moved.install()

from fyrehose.drivers.client import Client  # noqa: E402
from fyrehose.drivers.subscription import Subscription  # noqa: E402
from fyrehose.errors import (  # noqa: E402
    BackboneUnreachable,
    FyrehoseError,
    InputError,
    MessagesLost,
    PublishTimeout,
    RequestTimeout,
)
from fyrehose.protocol.codec import MAX_PAYLOAD, PayloadTooLarge, ProtocolError  # noqa: E402
from fyrehose.protocol.tracker import Lost, Message  # noqa: E402
from fyrehose.runtime.credentials import load_auth_database  # noqa: E402
from fyrehose.subjects.auth import AuthDatabase, AuthError, Credentials  # noqa: E402
from fyrehose.subjects.envelope import Envelope, EnvelopeError, MsgType, Status  # noqa: E402
from fyrehose.subjects.subscription_events import SubjectMessage  # noqa: E402

__all__ = [
    "AuthDatabase",
    "AuthError",
    "BackboneUnreachable",
    "Client",
    "Credentials",
    "Envelope",
    "EnvelopeError",
    "FyrehoseError",
    "InputError",
    "Lost",
    "MAX_PAYLOAD",
    "Message",
    "MessagesLost",
    "MsgType",
    "PayloadTooLarge",
    "ProtocolError",
    "PublishTimeout",
    "RequestTimeout",
    "Status",
    "SubjectMessage",
    "Subscription",
    "load_auth_database",
]
