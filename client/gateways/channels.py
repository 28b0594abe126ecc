"""Channel names (Redis, Marlin) as backbone subjects, and back.

Redis channels and Marlin channels are arbitrary byte strings; backbone
subjects are dot-separated UTF-8 tokens without whitespace or wildcards
(:func:`fyrehose.subjects.envelope.check_subject`).  A channel that already is a valid
literal subject travels as-is, so ``news.sports`` or ``user:42:events`` mean
the same thing to Redis, NATS and Marlin clients.  Every other channel
(whitespace, ``*``/``>``, empty tokens, bytes that are not UTF-8) travels as
``_CHAN.<base64url without padding>``; a channel that itself starts with
``_CHAN.`` is encoded too, so the mapping is one-to-one.  The empty channel
has no subject.

Some subjects are the deployment's own (:data:`INTERNAL_PREFIXES`): interest
announcements and session heartbeats.  A gateway client that could publish
there would forge what every gateway believes (receiver counts, no-responders)
under the gateway's own signature, and one that could read them would learn
the deployment's sessions; so gateways refuse both (:func:`is_internal`,
:func:`pattern_is_internal`) and never deliver them to wildcard subscriptions.
"""
from __future__ import annotations

import base64
import binascii

from fyrehose.subjects.envelope import MAX_SUBJECT, EnvelopeError, check_subject

ENCODED_PREFIX = "_CHAN."
_ENCODED_PREFIX_BYTES = ENCODED_PREFIX.encode()
# the longest channel that still fits MAX_SUBJECT once encoded
MAX_ENCODED_CHANNEL = (MAX_SUBJECT - len(ENCODED_PREFIX)) * 3 // 4


INTERNAL_PREFIXES = ("_INTEREST.", "_SESSION.")
_INTERNAL_ROOTS = frozenset(prefix[:-1] for prefix in INTERNAL_PREFIXES)


def is_internal(subject: str) -> bool:
    """Whether ``subject`` is one the deployment uses for itself (closed to gateway clients)."""
    return subject.startswith(INTERNAL_PREFIXES)


def pattern_is_internal(pattern: str) -> bool:
    """Whether a subscription pattern names an internal subject tree (``_INTEREST.>``, ``_SESSION.HB``).

    Patterns that only reach internal subjects through a wildcard (``>``,
    ``*.ANNOUNCE``) are allowed; delivery skips internal subjects.
    """
    return pattern.split(".", 1)[0] in _INTERNAL_ROOTS


class ChannelError(ValueError):
    """A channel that has no subject (empty, or too long to encode)."""


def channel_to_subject(channel: bytes) -> str:
    """The backbone subject carrying ``channel``."""
    if not channel:
        raise ChannelError("empty channel names cannot be carried on the backbone")
    if not channel.startswith(_ENCODED_PREFIX_BYTES):
        try:
            text = channel.decode("utf-8")
            check_subject(text)
            return text
        except (UnicodeDecodeError, EnvelopeError):
            pass
    if len(channel) > MAX_ENCODED_CHANNEL:
        raise ChannelError(f"channel of {len(channel)} bytes is too long (at most {MAX_ENCODED_CHANNEL} "
                           "when it is not a plain dot-separated subject)")
    return ENCODED_PREFIX + base64.urlsafe_b64encode(channel).rstrip(b"=").decode("ascii")


def subject_to_channel(subject: str) -> bytes:
    """The channel a subject stands for (its UTF-8 bytes unless it is an encoded channel)."""
    if subject.startswith(ENCODED_PREFIX):
        token = subject[len(ENCODED_PREFIX):]
        try:
            channel = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        except (binascii.Error, ValueError):
            return subject.encode("utf-8")
        if channel and channel_to_subject_or_none(channel) == subject:
            return channel
    return subject.encode("utf-8")


def channel_to_subject_or_none(channel: bytes) -> str | None:
    try:
        return channel_to_subject(channel)
    except ChannelError:
        return None
