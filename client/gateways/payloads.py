"""What a gateway client publishes, as the enveloped payload one backbone message carries.

Every connection hands its driver finished payloads (:class:`~fyrehose.gateways.requests.Publish`),
each checked on its own, so that an oversized message is refused alone
instead of failing the batch of confirmed publishes it would have joined.
The commonest publish of all, a message with no reply and no headers on a
channel or subject the gateway process has seen before, is built from bytes
prepared once for that name (:class:`PreparedHeads`): the envelope's
fixed header and subject, then the data, without an :class:`Envelope`
object, a subject check or an encoding step per message.  A gateway with
credentials stamps and signs each payload afterwards
(:meth:`fyrehose.subjects.session.SubjectSession.seal_payload`).
"""
from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from fyrehose.protocol.codec import MAX_PAYLOAD, PayloadTooLarge
from fyrehose.subjects.envelope import Envelope, encode

MAX_PREPARED = 4096  # names whose head is kept; past it they are all forgotten and prepared again as they come

Name = TypeVar("Name", bound=Hashable)


def encoded(message: Envelope) -> bytes:
    """``message`` as one backbone message's payload; EnvelopeError (bad subject) or PayloadTooLarge."""
    return fitting(encode(message))


def fitting(payload: bytes) -> bytes:
    if len(payload) > MAX_PAYLOAD:
        raise PayloadTooLarge(len(payload))
    return payload


class PreparedHeads(Generic[Name]):
    """Per channel (or subject) name: its subject and the encoded head of an UPDATE on it, without data.

    ``subject_of`` maps a name to its subject, raising whatever makes the
    name unpublishable (nothing is kept for such a name).  An envelope's data
    is the rest of its payload, so head + data is the whole envelope.
    """

    def __init__(self, subject_of: Callable[[Name], str], limit: int = MAX_PREPARED) -> None:
        self.subject_of = subject_of
        self.limit = limit
        self._heads: dict[Name, tuple[str, bytes]] = {}

    def get(self, name: Name) -> tuple[str, bytes]:
        """(subject, head) of ``name``."""
        prepared = self._heads.get(name)
        if prepared is None:
            subject = self.subject_of(name)
            if len(self._heads) >= self.limit:
                self._heads.clear()
            prepared = self._heads[name] = (subject, encode(Envelope(subject)))
        return prepared
