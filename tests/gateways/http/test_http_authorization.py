"""The HTTP gateway's credentials, pure: the Authorization parser's properties and the connection's answers with
--users (401 and the challenge, 429, 403, the Verify request, nothing published when refused).

Forged input: tools/fuzz/targets/fuzz_http_authorization.py, run by tests/tools/fuzz/test_fuzz_targets.py.
"""
from __future__ import annotations

import base64
import sys
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fyrehose.gateways.access.login import Access, Login
from fyrehose.gateways.access.users import Password, Token
from fyrehose.gateways.drivers.http.gateway import HttpGateway, HttpSettings
from fyrehose.gateways.http.authorization import (
    CHALLENGE,
    MalformedCredentials,
    parse_authorization,
    query_token,
    request_credential,
)
from fyrehose.gateways.http.connection import HttpConnection, Note, Stream
from fyrehose.gateways.requests import Publish, Snapshot, Verify
from fyrehose.subjects.envelope import peek_subject

from http_users_support import PASSWORD, users

FUZZ_DIR = Path(__file__).resolve().parents[3] / "tools" / "fuzz" / "targets"
sys.path.insert(0, str(FUZZ_DIR))

from fuzz_http import MemoryRouter  # noqa: E402

TOKEN68 = st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~+/", min_size=1,
                  max_size=200)


def basic(user: str, password: str) -> bytes:
    """The header line."""
    return b"Authorization: Basic " + base64.b64encode(f"{user}:{password}".encode())


# ---------------------------------------------------------------- the parser

@given(st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters=":"), max_size=40),
       st.text(st.characters(blacklist_categories=("Cs",)), max_size=80),
       st.sampled_from(["Basic", "basic", "BASIC", "bAsIc"]))
def test_basic_gives_back_user_and_password(user, password, scheme):
    value = scheme.encode() + b" " + base64.b64encode(f"{user}:{password}".encode())
    assert parse_authorization(value) == Password(user, password)


@given(TOKEN68, st.sampled_from(["Bearer", "bearer", "BEARER"]), st.sampled_from(["", "=", "=="]))
def test_bearer_gives_back_the_token(token, scheme, padding):
    assert parse_authorization(f"{scheme} {token}{padding}".encode()) == Token(token + padding)


@pytest.mark.parametrize("value", [
    b"", b"Bearer", b"Bearer ", b"Bearer a b", b"Bearer a=b", b"Bearer \xff", b"Digest username=x",
    b"Basic", b"Basic !!!", b"Basic " + base64.b64encode(b"no colon"), b"Basic " + base64.b64encode(b"\xff:x"),
    b"Bearer " + b"a" * 5000,
])
def test_malformed_values_are_refused(value):
    with pytest.raises(MalformedCredentials):
        parse_authorization(value)


def test_one_credential_per_request():
    assert request_credential([], "seq=1", query_allowed=True) is None
    assert request_credential([], "access_token=fh_x_y&seq=1", query_allowed=True) == Token("fh_x_y")
    assert request_credential([], "access_token=fh_x_y", query_allowed=False) is None  # not on this route
    assert request_credential([b"Bearer t"], "", query_allowed=True) == Token("t")
    for headers, query in (([b"Bearer a", b"Bearer a"], ""), ([b"Bearer a"], "access_token=b"),
                           ([], "access_token=a&access_token=b"), ([], "access_token=")):
        with pytest.raises(MalformedCredentials):
            request_credential(headers, query, query_allowed=True)
    assert query_token("x=access_token") is None


# ---------------------------------------------------------------- the connection with --users

class Client:
    """One pure HttpConnection of a gateway with alice and bob; requests carried out as a driver would."""

    def __init__(self, anonymous: bool = False) -> None:
        self.users = users(anonymous=anonymous)
        self.stats: Counter = Counter()
        self.access = Access(self.users.file, self.stats)
        self.gateway = HttpGateway(HttpSettings(backbone="127.0.0.1:1"), self.stats)
        self.router = MemoryRouter()
        self.gateway.router = self.router  # type: ignore[assignment]
        self.connection = HttpConnection(self.gateway, self.router, 0.0, Login(self.access, "10.0.0.1"))
        self.published: list[bytes] = []
        self.verifies = 0
        self.notes: list[str] = []
        self.streams: list[Stream] = []

    def send(self, data: bytes, now: float = 1.0) -> bytes:
        connection = self.connection
        connection.receive(data, now)
        while connection.requests:
            request = connection.requests.pop(0)
            if isinstance(request, Verify):
                self.verifies += 1
                connection.verified(request.token, request.users.verify(request.credential))
            elif isinstance(request, Publish):
                self.published += request.payloads
                connection.published(request.token, self.router.publish(request.payloads))
            elif isinstance(request, Snapshot):
                connection.answered(request.token, None)
            elif isinstance(request, Note):
                self.notes.append(request.line)
            elif isinstance(request, Stream):
                self.streams.append(request)
        return connection.outbox.take()


def request(method: str, target: str, *headers: bytes, body: bytes = b"") -> bytes:
    lines = [f"{method} {target} HTTP/1.1".encode(), b"Host: h", f"Content-Length: {len(body)}".encode(), *headers]
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


def test_missing_and_wrong_credentials_get_401_with_both_challenges():
    client = Client()
    out = client.send(request("POST", "/v1/publish/prices.acme", body=b"1"))
    assert out.startswith(b"HTTP/1.1 401 Unauthorized\r\n")
    assert f"www-authenticate: {CHALLENGE}\r\n".encode() in out
    out = client.send(request("POST", "/v1/publish/prices.acme", basic("alice", "wrong"), body=b"1"))
    assert out.startswith(b"HTTP/1.1 401 ") and CHALLENGE.encode() in out
    out = client.send(request("GET", "/v1/last/prices.acme", b"Authorization: Bearer fh_0123456789abcdef_nope"))
    assert out.startswith(b"HTTP/1.1 401 ")
    out = client.send(request("GET", "/metrics", b"Authorization: Negotiate abc"))
    assert out.startswith(b"HTTP/1.1 401 ")
    assert client.published == [] and client.stats["logins refused"] == 2
    assert client.notes  # logged (once a second per address)


def test_bearer_and_basic_are_verified_once_then_remembered():
    client = Client()
    bearer = f"Authorization: Bearer {client.users.token}".encode()
    for _ in range(3):
        out = client.send(request("POST", "/v1/publish/prices.acme", bearer, body=b"1"))
        assert out.startswith(b"HTTP/1.1 200 ") and b'"seq"' in out
    for _ in range(3):
        out = client.send(request("POST", "/v1/publish/prices.acme", basic("alice", PASSWORD), body=b"2"))
        assert out.startswith(b"HTTP/1.1 200 ")
    assert client.verifies == 2  # the token once, the password once: then a keyed hash, no scrypt
    assert [peek_subject(p) for p in client.published] == ["prices.acme"] * 6


def test_pipelined_requests_wait_for_the_verification():
    client = Client()
    bearer = f"Authorization: Bearer {client.users.token}".encode()
    client.connection.receive(request("POST", "/v1/publish/prices.a", bearer, body=b"1")
                              + request("GET", "/healthz"), 1.0)
    [verify] = client.connection.requests
    assert isinstance(verify, Verify) and client.connection.paused
    assert client.connection.outbox.take() == b""
    client.connection.requests.clear()
    client.connection.verified(verify.token, verify.users.verify(verify.credential))
    [publish] = client.connection.requests
    assert isinstance(publish, Publish)


def test_outside_the_rights_is_403_for_a_user_and_401_for_the_anonymous():
    client = Client(anonymous=True)
    bearer = f"Authorization: Bearer {client.users.token}".encode()
    assert client.send(request("POST", "/v1/publish/prices.secret", bearer, body=b"x")).startswith(b"HTTP/1.1 403 ")
    assert client.send(request("POST", "/v1/publish/news.a", bearer, body=b"x")).startswith(b"HTTP/1.1 403 ")
    assert client.send(request("GET", "/v1/last/prices.secret", bearer)).startswith(b"HTTP/1.1 403 ")
    assert client.send(request("GET", "/v1/stream/>", bearer)).startswith(b"HTTP/1.1 403 ")
    assert client.published == []
    assert client.stats["publishes refused"] == 2 and client.stats["subscriptions refused"] == 2
    # the anonymous user reads public.>, publishes nothing; logging in may help: 401
    assert client.send(request("GET", "/v1/last/public.x")).startswith(b"HTTP/1.1 504 ")  # allowed: no cache here
    assert client.send(request("POST", "/v1/publish/public.x", body=b"x")).startswith(b"HTTP/1.1 401 ")
    assert client.send(request("GET", "/metrics")).startswith(b"HTTP/1.1 401 ")
    assert client.send(request("GET", "/metrics", bearer)).startswith(b"HTTP/1.1 200 ")


def test_open_routes_need_no_credentials():
    client = Client()
    assert client.send(request("GET", "/healthz")).startswith(b"HTTP/1.1 200 ")
    assert client.send(request("GET", "/live.js")).startswith(b"HTTP/1.1 200 ")
    assert client.verifies == 0


def test_a_stream_carries_the_login_and_delivers_only_what_the_user_may_receive():
    client = Client()
    out = client.send(request("GET", f"/v1/stream/prices.>?access_token={client.users.token}"))
    assert out.startswith(b"HTTP/1.1 200 ")
    [stream] = client.streams
    assert stream.login is not None and stream.login.name == "alice"
    assert stream.login.may_receive("prices.acme") and not stream.login.may_receive("prices.secret")


def test_the_token_in_a_query_is_only_for_the_stream_and_the_websocket():
    client = Client()
    out = client.send(request("POST", f"/v1/publish/prices.a?access_token={client.users.token}", body=b"x"))
    assert out.startswith(b"HTTP/1.1 401 ") and client.verifies == 0


def test_failures_from_an_address_are_throttled_with_429():
    client = Client()
    statuses = []
    for _ in range(6):
        out = client.send(request("GET", "/metrics", basic("alice", "guess")))
        statuses.append(out[9:12])
    assert statuses == [b"401"] * 4 + [b"429"] * 2  # the free failures, then one past them opens the window
    assert b"retry-after: 1\r\n" in out
    assert client.verifies == 4  # a throttled attempt is not even hashed
    assert client.send(request("GET", "/metrics", basic("alice", PASSWORD)), now=2.5).startswith(b"HTTP/1.1 200 ")


def test_without_users_every_route_is_open():
    gateway = HttpGateway(HttpSettings(backbone="127.0.0.1:1"))
    router = MemoryRouter()
    gateway.router = router  # type: ignore[assignment]
    connection = HttpConnection(gateway, router, 0.0, Login(Access(None), "10.0.0.1"))
    connection.receive(request("GET", "/metrics", b"Authorization: Bearer whatever"), 1.0)
    assert connection.outbox.take().startswith(b"HTTP/1.1 200 ")

