"""Fuzz target: the HTTP gateway's credential parser takes any header value and query, or refuses them cleanly.

Input: the first byte picks how many ``Authorization`` headers (0-2) and
whether the query may carry ``access_token``; the rest, split at a NUL, is the
header values and the query.  Oracles: the parser returns a credential or
None, or raises :class:`MalformedCredentials`, never anything else; what it
returns is bounded in size.
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import instrumented, main  # noqa: E402

with instrumented():
    from fyrehose.gateways.access.users import Password, Token
    from fyrehose.gateways.http.authorization import MAX_VALUE, MalformedCredentials, request_credential

SEEDS = [
    b"\x01Bearer fh_abc_def\x00",
    b"\x01Basic YWxpY2U6c2VjcmV0\x00",
    b"\x02bearer x\x00basic eDp5\x00",
    b"\x04\x00access_token=fh_a_b&seq=1",
    b"\x05Bearer a\x00access_token=b",
    b"\x01Digest username=\"x\"\x00",
]


def check(data: bytes) -> None:
    if not data:
        return
    parts = data[1:].split(b"\x00")
    headers = parts[:data[0] % 3]
    query = parts[-1].decode("latin-1") if len(parts) > data[0] % 3 else ""
    try:
        credential = request_credential(headers, query, query_allowed=bool(data[0] & 4))
    except MalformedCredentials:
        return
    if credential is None:
        assert not headers
        return
    assert isinstance(credential, Token | Password)
    size = len(credential.token) if isinstance(credential, Token) else len(credential.password)
    assert size <= MAX_VALUE


if __name__ == "__main__":
    main(check, SEEDS)
