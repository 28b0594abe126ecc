"""A Redis client's credentials and channels, read against the gateway's users (docs/gateways.md, "Redis: users").

Redis's ACL grants channels by glob (``&news.*``); the users file grants
subject patterns (``news.>``, NATS rules).  A Redis channel is a subject
(:mod:`fyrehose.gateways.channels`), so the checks are made on subjects:

- ``PUBLISH ch`` and ``SUBSCRIBE ch``: the channel's subject must be
  permitted (publish, or subscribe); a channel that has no subject (the empty
  one) only to a user whose subscribe rights are everything;
- ``PSUBSCRIBE glob``: Redis allows a pattern subscription only when it is
  *literally* one of the user's channel patterns, unless the user has all
  channels (``ACLCheckChannelAgainstList``); here a glob is allowed when the
  user's subscribe rights are everything, or it has no glob metacharacter
  (``*``, ``?``, ``[``, ``\\``: it matches one channel, which is then checked as
  ``SUBSCRIBE`` checks it), or it is literally one of the user's subscribe
  allow patterns (and not wholly inside a deny);
- every message delivered to a client whose rights are not everything is
  asked again per subject (:meth:`fyrehose.gateways.access.login.Login.may_receive`,
  cached per subject), so a glob wider than the right it was granted by
  (``news.*`` matches ``news.a.b`` as a glob, not as a subject pattern), a
  subscription overlapping a deny, and rights changed by a re-read users
  file never let a message through that the user may not read.

Pure: no I/O.
"""
from __future__ import annotations

import re

from fyrehose.gateways.access.login import Login
from fyrehose.gateways.access.users import Password
from fyrehose.gateways.channels import channel_to_subject_or_none

GLOB_SPECIAL = re.compile(rb"[*?\[\\]")  # what makes a Redis pattern match more than its own bytes
_LONG_LONG = re.compile(rb"-?[1-9][0-9]{0,18}|0")  # Redis's string2ll: no sign but '-', no leading zero, no space
LONG_LONG_MAX = (1 << 63) - 1


def may_publish(login: Login, channel: bytes) -> bool:
    subject = channel_to_subject_or_none(channel)
    return subject is not None and login.may_publish(subject)


def may_subscribe(login: Login, channel: bytes) -> bool:
    subject = channel_to_subject_or_none(channel)
    if subject is None:
        user = login.user
        return user is not None and user.subscribe.everything
    return login.may_subscribe(subject)


def may_psubscribe(login: Login, pattern: bytes) -> bool:
    user = login.user
    if user is None:
        return False
    rights = user.subscribe
    if rights.everything:
        return True
    if GLOB_SPECIAL.search(pattern) is None:
        return may_subscribe(login, pattern)
    text = pattern.decode("utf-8", "replace")
    return rights.allow is not None and text in rights.allow and rights.permits_subscription(text)


def password(user: bytes | None, secret: bytes) -> Password:
    """The credential of ``AUTH [user] password`` (bytes that are not UTF-8 kept apart, never equal to a text)."""
    return Password(None if user is None else user.decode("utf-8", "surrogateescape"),
                    secret.decode("utf-8", "surrogateescape"))


def long_long(text: bytes) -> int | None:
    """The integer Redis reads from an argument (``string2ll``), or None where Redis says it is not one."""
    if _LONG_LONG.fullmatch(text) is None:
        return None
    value = int(text)
    return value if -LONG_LONG_MAX - 1 <= value <= LONG_LONG_MAX else None
