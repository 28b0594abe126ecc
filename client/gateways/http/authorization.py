"""The credential of one HTTP request: ``Authorization: Bearer`` or ``Basic``, or ``?access_token=``; pure.

Every request of a kept-alive connection carries its own credential, as HTTP
has it (RFC 9110, section 11).  Two schemes are understood:

* ``Bearer TOKEN`` (RFC 6750): a token of the users file;
* ``Basic BASE64(user:password)`` (RFC 7617, UTF-8): a user's password.

Browsers cannot set headers on a WebSocket or an ``EventSource``, so the two
routes they open that way (the WebSocket upgrade and ``GET /v1/stream``)
also take the token as the ``access_token`` query parameter, RFC 6750's
section 2.3 form.  A request carrying both is refused (RFC 6750: one method
per request).  A URL with a token in it is never logged by the gateway.

The scheme name is case-insensitive; a malformed value, an unknown scheme or
more than one ``Authorization`` header is :class:`MalformedCredentials`,
which the gateway answers as a missing credential: ``401`` and the challenge.
"""
from __future__ import annotations

import binascii
from base64 import b64decode
from urllib.parse import parse_qsl

from fyrehose.gateways.access.secrets import MAX_SECRET
from fyrehose.gateways.access.users import Credential, Password, Token

CHALLENGE = 'Bearer realm="fyrehose", Basic realm="fyrehose"'  # RFC 7235: one header, two challenges
QUERY_TOKEN = "access_token"
_TOKEN68 = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~+/")
MAX_VALUE = 4 * MAX_SECRET  # a longer header value proves nothing: refused without decoding


class MalformedCredentials(ValueError):
    """An ``Authorization`` header or ``access_token`` that is not a credential this gateway reads."""


def parse_authorization(value: bytes) -> Credential:
    """The credential of one ``Authorization`` header value."""
    if len(value) > MAX_VALUE:
        raise MalformedCredentials(f"Authorization header over {MAX_VALUE} bytes")
    scheme, _, rest = value.strip(b" \t").partition(b" ")
    rest = rest.strip(b" \t")
    if not _is_token68(rest):
        raise MalformedCredentials("the credentials are not one token68 value")
    kind = scheme.lower()
    if kind == b"bearer":
        return Token(rest.decode("ascii"))
    if kind == b"basic":
        return _basic(rest)
    raise MalformedCredentials(f"unknown authentication scheme {scheme[:20].decode('latin-1')!r} "
                               "(Bearer and Basic are understood)")


def query_token(query: str) -> Token | None:
    """The ``access_token`` parameter of a request target's query, if it has one."""
    if QUERY_TOKEN not in query:  # the common case, without parsing
        return None
    tokens = [value for name, value in parse_qsl(query, keep_blank_values=True) if name == QUERY_TOKEN]
    if not tokens:
        return None
    if len(tokens) > 1:
        raise MalformedCredentials(f"more than one {QUERY_TOKEN} parameter")
    token = tokens[0]
    if not token or len(token) > MAX_VALUE or not _is_token68(token.encode("utf-8", "replace")):
        raise MalformedCredentials(f"the {QUERY_TOKEN} parameter is not a token")
    return Token(token)


def request_credential(authorizations: list[bytes], query: str, *, query_allowed: bool) -> Credential | None:
    """The one credential a request carries (None: none), from its ``Authorization`` headers and its query."""
    if len(authorizations) > 1:
        raise MalformedCredentials("more than one Authorization header")
    from_query = query_token(query) if query_allowed else None
    if authorizations:
        if from_query is not None:
            raise MalformedCredentials(f"credentials both in the Authorization header and in {QUERY_TOKEN}")
        return parse_authorization(authorizations[0])
    return from_query


def _basic(encoded: bytes) -> Password:
    try:
        decoded = b64decode(encoded, validate=True).decode("utf-8")
    except (binascii.Error, ValueError):
        raise MalformedCredentials("Basic credentials are not base64 of UTF-8 text") from None
    user, colon, password = decoded.partition(":")
    if not colon:
        raise MalformedCredentials("Basic credentials without the ':' between user and password")
    return Password(user, password)


def _is_token68(value: bytes) -> bool:
    """RFC 7235's token68: token characters, then only '=' padding."""
    body = value.rstrip(b"=")
    return bool(body) and all(byte in _TOKEN68 for byte in body)
