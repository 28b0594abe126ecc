"""A Lumberjack event as a backbone message: an envelope whose subject comes from one field of the event.

The message is ``Envelope(subject, data=orjson.dumps(event))``: a ``D``
frame's pairs become a JSON object of strings, a ``J`` frame's document is
parsed and written again by orjson (so every message holds compact JSON).

The subject is the value of ``--subject-field`` (default ``@metadata.beat``,
which Beats fill with their name).  The field is looked up as a top-level key
first; if there is none and the name has dots, it is a path through nested
objects (``host.name`` reads ``{"host": {"name": ...}}``).  A string value is
used as it is, a number as its JSON text; any other value, or no value,
means the default subject.  The value then becomes a valid subject (see
:func:`subject_from_value`); a subject the deployment keeps for itself
(``_INTEREST.*``, ``_SESSION.*``: :func:`fyrehose.gateways.channels.is_internal`)
is never taken from an event: such events go to the default subject.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import orjson

from fyrehose.errors import InputError
from fyrehose.gateways.channels import is_internal
from fyrehose.gateways.lumberjack.protocol import DataFrame, KeyValueData, LumberjackError
from fyrehose.protocol.codec import MAX_PAYLOAD
from fyrehose.subjects.envelope import MAX_SUBJECT, Envelope, check_subject, encode

DEFAULT_SUBJECT_FIELD = "@metadata.beat"
DEFAULT_SUBJECT = "lumberjack"


def _is_bad_subject_char(char: str) -> bool:
    return char.isspace() or not char.isprintable() or char in "*>"


def subject_from_value(value: str) -> str | None:
    """A valid subject made from any text, or None if nothing usable remains.

    Dots separate tokens as usual; empty tokens (leading, trailing or doubled
    dots) are dropped; every whitespace, non-printable, ``*`` or ``>``
    character becomes ``_``; the result is cut to 1024 UTF-8 bytes at a token
    boundary (or inside the first token, if that alone is longer).
    """
    tokens = ["".join("_" if _is_bad_subject_char(char) else char for char in token)
              for token in value.split(".") if token]
    subject = ".".join(tokens)
    raw = subject.encode("utf-8")
    if len(raw) > MAX_SUBJECT:
        cut = raw[:MAX_SUBJECT + 1].rfind(b".")
        raw = raw[:cut] if cut > 0 else raw[:MAX_SUBJECT]
        subject = raw.decode("utf-8", "ignore")
    return subject or None


@dataclass(frozen=True, slots=True)
class SubjectRule:
    """Where an event's subject comes from: ``field``, else ``default``."""

    field: str = DEFAULT_SUBJECT_FIELD
    default: str = DEFAULT_SUBJECT

    def __post_init__(self) -> None:
        if not self.field:
            raise InputError("the subject field name must not be empty")
        check_subject(self.default)
        if is_internal(self.default):
            raise InputError(f"the default subject {self.default} is internal to the deployment")

    def subject(self, event: dict) -> str:
        value = event.get(self.field)
        if value is None and "." in self.field:
            value = event
            for part in self.field.split("."):
                value = value.get(part) if isinstance(value, dict) else None
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            return self.default
        text = value if isinstance(value, str) else orjson.dumps(value).decode()
        subject = subject_from_value(text)
        return subject if subject is not None and not is_internal(subject) else self.default


class PublishRefused(LumberjackError):
    """An event whose subject its writer's user may not publish to (``--users``)."""


def to_message(frame: DataFrame, rule: SubjectRule, may_publish: Callable[[str], bool] | None = None) -> bytes:
    """The envelope to publish for one event; LumberjackError if it is not a JSON object or too large,
    :class:`PublishRefused` if ``may_publish`` (None: everything may be published) refuses its subject."""
    if isinstance(frame, KeyValueData):
        event: dict = frame.fields
    else:
        try:
            event = orjson.loads(frame.document)
        except orjson.JSONDecodeError as exc:
            raise LumberjackError(f"event {frame.seq}: invalid JSON: {exc}") from None
        if not isinstance(event, dict):
            raise LumberjackError(f"event {frame.seq}: the JSON document is not an object")
    subject = rule.subject(event)
    if may_publish is not None and not may_publish(subject):
        raise PublishRefused(f"event {frame.seq}: no permission to publish to {subject}")
    message = encode(Envelope(subject, orjson.dumps(event)))
    if len(message) > MAX_PAYLOAD:
        raise LumberjackError(
            f"event {frame.seq}: {len(message)} bytes as a message, above the backbone's limit of {MAX_PAYLOAD}")
    return message
