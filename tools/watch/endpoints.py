"""Which metrics endpoints ``fyrehose top`` reads: from its arguments and from a small file, one per line.

``HOST:PORT`` means ``http://HOST:PORT/metrics`` (every fyrehose process serves
``/metrics``; the HTTP gateway on its own port); a full ``http://`` or
``https://`` URL is taken as it is.  Pure: text in, URLs out.
"""
from __future__ import annotations

from urllib.parse import urlsplit

from fyrehose.errors import InputError

MAX_ENDPOINTS = 256


def endpoint_url(text: str) -> str:
    """The URL to read for ``text``, or an InputError that says what is wrong with it."""
    given = text.strip()
    url = given if "://" in given else f"http://{given}/metrics"
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise InputError(f"endpoint {given!r}: {exc}") from None
    if parts.scheme not in ("http", "https"):
        raise InputError(f"endpoint {given!r}: only http:// and https:// endpoints are read")
    if not parts.hostname or port is None:
        raise InputError(f"endpoint {given!r}: expected HOST:PORT or http://HOST:PORT/PATH")
    if any(char.isspace() for char in url):
        raise InputError(f"endpoint {given!r}: no spaces in an endpoint")
    return url if parts.path else f"{url}/metrics"


def display_name(url: str) -> str:
    """How a row names its endpoint: ``HOST:PORT`` for the usual ``http://HOST:PORT/metrics``, else the URL."""
    if url.startswith("http://") and url.endswith("/metrics") and url.count("/") == 3:
        return url[len("http://"):-len("/metrics")]
    return url


def parse_config(text: str, source: str) -> list[str]:
    """The endpoints a config file lists: one per line, ``#`` starts a comment, blank lines are skipped."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.partition("#")[0].strip()
        if not line:
            continue
        try:
            found.append(endpoint_url(line))
        except InputError as exc:
            raise InputError(f"{source}:{number}: {exc}") from None
    return found


def combine(*groups: list[str]) -> list[str]:
    """Every endpoint once, in the order first given; at least one, at most MAX_ENDPOINTS."""
    endpoints = list(dict.fromkeys(url for group in groups for url in group))
    if not endpoints:
        raise InputError("no endpoint to read: give ENDPOINT arguments or --config FILE")
    if len(endpoints) > MAX_ENDPOINTS:
        raise InputError(f"{len(endpoints)} endpoints: at most {MAX_ENDPOINTS}")
    return endpoints
