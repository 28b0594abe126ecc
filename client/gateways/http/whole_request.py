"""An HTTP/1.1 request that arrived whole in one read, parsed by llhttp (httptools, uvicorn's parser); pure.

h11 spends 60-100 µs of Python on a request and its response; llhttp parses
one in C in a few.  :class:`WholeRequestReader` takes what one read brought
while h11 has nothing buffered and returns a :class:`WholeRequest` only for
the plainest case, one a kept-alive client sends for each ``POST``: exactly
one HTTP/1.1 request, whole, its head ended by CRLFs, exactly one ``Host``, exactly one
``Content-Length`` (within ``--max-message``) and its body, a head well
within ``--max-head``, every header value one h11 accepts, and none of
``Connection``, ``Transfer-Encoding``, ``Expect``, ``Upgrade`` (they change
what the connection does next).  Anything else returns ``None`` and goes to
h11 as before, so h11 alone still decides every error, limit and unusual
request; tests/gateways/http/test_http_whole_request.py checks that a
connection reading this way answers every input, split anywhere, exactly as
one reading only with h11.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import httptools

# h11's field-value (RFC 9110 field-content): visible characters and obs-text, inner spaces and tabs.
FIELD_VALUE = re.compile(rb"(?:[\x21-\x7e\x80-\xff](?:[\x20\x09\x21-\x7e\x80-\xff]*[\x21-\x7e\x80-\xff])?)?")
TARGET = re.compile(rb"/[\x21-\x7e]*")  # origin form, h11's visible characters
TURNS = frozenset((b"connection", b"transfer-encoding", b"expect", b"upgrade"))  # h11 handles these


@dataclass(slots=True)
class WholeRequest:
    method: bytes
    target: bytes
    body: bytes


class _Declined(Exception):
    """The request is not the plain case: h11 reads it."""


class WholeRequestReader:
    """Reads a whole plain request with llhttp, or says ``None`` for h11 to read the same bytes."""

    def __init__(self, max_head: int, max_message: int) -> None:
        self.max_head = max_head
        self.max_message = max_message
        self._parser = httptools.HttpRequestParser(self)
        self._begun = 0
        self._complete = False
        self._target = b""
        self._host = False
        self._length: bytes | None = None
        self._body: list[bytes] = []

    def read(self, data: bytes) -> WholeRequest | None:
        """The one request ``data`` holds entirely, when it is the plain case; else None (nothing is kept)."""
        self._begun, self._complete, self._target, self._host, self._length = 0, False, b"", False, None
        self._body = []
        parser = self._parser
        try:
            parser.feed_data(data)
        except (_Declined, httptools.HttpParserError, httptools.HttpParserUpgrade):  # CONNECT reads as an upgrade
            self._parser = httptools.HttpRequestParser(self)  # whatever state it was left in goes with it
            return None
        request = self._plain(data)
        if request is None or not parser.should_keep_alive():
            self._parser = httptools.HttpRequestParser(self)
            return None
        return request

    def _plain(self, data: bytes) -> WholeRequest | None:
        """The request just parsed, if it is the plain case to the byte."""
        length, parser = self._length, self._parser
        if not self._complete or self._begun != 1 or length is None or not self._host:
            return None
        method = parser.get_method()
        head_end = data.find(b"\r\n\r\n") + 4
        head = data[:head_end]
        body = b"".join(self._body)
        if (parser.get_http_version() != "1.1" or head_end == 3 or head_end + len(body) != len(data)
                or head_end > self.max_head // 2 or not data.startswith(method + b" " + self._target + b" HTTP/1.1\r\n")
                or head.count(b"\n") != head.count(b"\r\n") or head.count(b"\r") != head.count(b"\r\n")
                or int(length) != len(body)):
            return None
        return WholeRequest(method, self._target, body)

    # ------------------------------------------------------------ llhttp's callbacks

    def on_message_begin(self) -> None:
        self._begun += 1
        if self._begun > 1:
            raise _Declined  # a second request follows (pipelined): h11 keeps it for after the first

    def on_url(self, url: bytes) -> None:
        self._target += url
        if not TARGET.fullmatch(self._target):
            raise _Declined

    def on_header(self, name: bytes, value: bytes) -> None:
        name = name.lower()
        if name in TURNS or not FIELD_VALUE.fullmatch(value):
            raise _Declined
        if name == b"content-length":
            if self._length is not None or not value.isdigit() or int(value) > self.max_message:
                raise _Declined
            self._length = value
        elif name == b"host":
            if self._host:
                raise _Declined  # h11 refuses two
            self._host = True

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        self._complete = True
