"""The HTTP gateway with --users, driven by curl, Python's urllib, curl -N (SSE) and Python websockets.

Bearer and Basic on every route, 401 with both challenges, 403 outside the
user's rights, /healthz open and /metrics closed, the token as ``access_token``
where a browser cannot send a header (and never in the log), a SIGHUP re-read,
and nothing a refused client sends reaching the backbone.
"""
from __future__ import annotations

import asyncio
import base64
import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import websockets

from fyrehose import Client
from fyrehose.gateways.access.permissions import Permissions
from fyrehose.gateways.access.secrets import hash_secret
from fyrehose.gateways.access.users import Entry, User
from fyrehose.gateways.http.authorization import CHALLENGE
from fyrehose.subjects.envelope import Envelope, decode

from gateway_support import GatewayProcess, SseReader
from http_users_support import PASSWORD, Users, users
from support import EVENT_WITHIN, LOOPBACK, wait_until

HELLO3 = b"*2\r\n$5\r\nHELLO\r\n$1\r\n3\r\n"


@pytest.fixture(scope="module")
def alice(tmp_path_factory) -> Users:
    return users(path=tmp_path_factory.mktemp("http-users") / "users.json")


@pytest.fixture(scope="module")
def gateway(module_backbone, alice, tmp_path_factory):
    process = GatewayProcess("http", module_backbone.address, tmp_path_factory.mktemp("http-users-gateway"),
                             ["--users", str(alice.path)]).start()
    yield process
    process.kill()


def url(gateway: GatewayProcess, path: str) -> str:
    return f"http://{LOOPBACK}:{gateway.port}{path}"


def curl(*args: str) -> tuple[int, dict[str, str], bytes]:
    """Status, header fields (lower-case names) and body of one curl request."""
    completed = subprocess.run(["curl", "-s", "-S", "--max-time", "20", "-D", "-", *args],
                               capture_output=True, timeout=25)
    head, _, body = completed.stdout.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    fields = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        fields[name.strip().lower()] = value.strip()
    return int(lines[0].split()[1]), fields, body


def bearer(token: str) -> str:
    return f"Authorization: Bearer {token}"


def basic_auth(user: str, password: str) -> str:
    return "Authorization: Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def test_curl_publishes_with_a_bearer_token_and_with_basic(gateway, alice):
    status, _, body = curl("-H", bearer(alice.token), "--data-binary", "1", url(gateway, "/v1/publish/prices.acme"))
    assert status == 200 and json.loads(body)["seq"] > 0
    status, _, body = curl("-u", f"alice:{PASSWORD}", "--data-binary", "2", url(gateway, "/v1/publish/prices.acme"))
    assert status == 200 and json.loads(body)["seq"] > 0


GUARDED = (("/v1/publish/prices.acme", "POST"), ("/v1/last/prices.acme", "GET"), ("/v1/stream/prices.%3E", "GET"),
           ("/metrics", "GET"))


def test_missing_credentials_are_401_with_the_challenge(gateway):
    for path, method in GUARDED:
        status, fields, _ = curl("-X", method, url(gateway, path))
        assert status == 401, path
        assert fields["www-authenticate"] == CHALLENGE


def test_wrong_credentials_are_401_then_the_address_is_slowed_with_429(module_backbone, tmp_path):
    """On a gateway of its own: the failures of one address (127.0.0.1 for every test) open a refusal window."""
    keys = users(path=tmp_path / "users.json")
    process = GatewayProcess("http", module_backbone.address, tmp_path, ["--users", str(keys.path)]).start()
    try:
        attempts = [["-u", "alice:wrong"], ["-u", "nobody:x"], ["-H", bearer("fh_0123456789abcdef_x")],
                    ["-H", "Authorization: Digest username=alice"], ["-u", "alice:wrong"]]
        answers = []
        for (path, method), credentials in zip(GUARDED + GUARDED[:1], attempts):
            status, fields, _ = curl("-X", method, *credentials, url(process, path))
            answers.append((status, fields.get("www-authenticate"), fields.get("retry-after")))
        # the malformed Digest header is no guess at a secret: it is not counted as a failed login
        assert answers[:4] == [(401, CHALLENGE, None)] * 4
        assert answers[4] == (401, CHALLENGE, None)  # the fourth failure: checked, then the window opens
        status, fields, _ = curl("-u", f"alice:{PASSWORD}", url(process, "/metrics"))
        assert status == 429 and int(fields["retry-after"]) >= 1  # slowed: not even the right password is looked at
        assert wait_until(lambda: "login refused" in process.log_text(), EVENT_WITHIN)
    finally:
        process.kill()


def test_outside_the_rights_is_403(gateway, alice):
    token = bearer(alice.token)
    assert curl("-H", token, "--data-binary", "x", url(gateway, "/v1/publish/prices.secret"))[0] == 403
    assert curl("-H", token, "--data-binary", "x", url(gateway, "/v1/publish/news.today"))[0] == 403
    assert curl("-H", token, url(gateway, "/v1/last/prices.secret"))[0] == 403
    assert curl("-H", token, url(gateway, "/v1/stream/%3E"))[0] == 403
    assert curl("-u", f"bob:{PASSWORD}", url(gateway, "/v1/stream/prices.%3E"))[0] == 403


def test_healthz_is_open_and_metrics_need_a_user(gateway, alice):
    assert curl(url(gateway, "/healthz"))[0] == 200
    assert curl(url(gateway, "/"))[0] == 200  # the live view's page, which asks for the token
    assert curl(url(gateway, "/metrics"))[0] == 401
    status, _, body = curl("-u", f"bob:{PASSWORD}", url(gateway, "/metrics"))
    assert status == 200 and b"fyrehose_gateway_logins_accepted_total" in body


def test_urllib_with_a_bearer_header_and_with_its_basic_auth_handler(gateway, alice):
    request = urllib.request.Request(url(gateway, "/v1/publish/prices.urllib"), data=b"b", method="POST",
                                     headers={"Authorization": f"Bearer {alice.token}"})
    with urllib.request.urlopen(request, timeout=20) as response:
        assert response.status == 200
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(urllib.request.Request(url(gateway, "/v1/publish/prices.urllib"), data=b"b"),
                               timeout=20)
    assert refused.value.code == 401 and refused.value.headers["WWW-Authenticate"] == CHALLENGE
    # urllib's own Basic handler answers the challenge (it picks Basic out of the two)
    passwords = urllib.request.HTTPPasswordMgrWithDefaultRealm()
    passwords.add_password(None, url(gateway, "/"), "alice", PASSWORD)
    opener = urllib.request.build_opener(urllib.request.HTTPBasicAuthHandler(passwords))
    with opener.open(urllib.request.Request(url(gateway, "/v1/publish/prices.urllib"), data=b"c"),
                     timeout=20) as response:
        assert response.status == 200 and json.loads(response.read())["seq"] > 0
    with pytest.raises(urllib.error.HTTPError) as forbidden:
        opener.open(urllib.request.Request(url(gateway, "/v1/publish/bob.x"), data=b"c"), timeout=20)
    assert forbidden.value.code == 403


@pytest.mark.parametrize("how", ["header", "query"])
def test_sse_with_a_token_skips_what_the_user_may_not_receive(gateway, alice, module_backbone, how):
    path = "/v1/stream/prices.%3E"
    reader = (SseReader(url(gateway, path), bearer(alice.token)) if how == "header"
              else SseReader(url(gateway, f"{path}?access_token={alice.token}")))
    try:
        reader.read_until(b": stream prices.>\n\n")
        with Client(module_backbone.address, subscribe=False) as publisher:  # straight to the backbone
            publisher.publish_many([Envelope("prices.secret", b"hidden " + how.encode()),
                                    Envelope("prices.sse", b"shown " + how.encode())])
        data = reader.read_until(b"shown " + how.encode())
    finally:
        reader.close()
    assert b"hidden" not in data and b"prices.secret" not in data
    assert alice.token.encode() not in gateway.log_text().encode()  # a token in a URL is never logged


async def _resp_over_websocket(port: int, token: str) -> list[bytes]:
    got = []
    for connect in (dict(uri=f"ws://{LOOPBACK}:{port}/resp", additional_headers={"Authorization": f"Bearer {token}"}),
                    dict(uri=f"ws://{LOOPBACK}:{port}/resp?access_token={token}")):
        async with websockets.connect(**connect) as ws:  # type: ignore[arg-type]
            await ws.send(HELLO3)
            await asyncio.wait_for(ws.recv(), 10)
            await ws.send(b"PING\r\n")
            got.append(await asyncio.wait_for(ws.recv(), 10))
    return got


def test_websocket_with_a_token_in_the_header_or_the_query(gateway, alice):
    assert asyncio.run(_resp_over_websocket(gateway.port, alice.token)) == [b"+PONG\r\n", b"+PONG\r\n"]


def test_websocket_without_a_token_is_refused_with_401(gateway):
    async def attempt() -> int:
        try:
            async with websockets.connect(f"ws://{LOOPBACK}:{gateway.port}/resp"):
                return 101
        except websockets.InvalidStatus as exc:
            assert exc.response.headers["WWW-Authenticate"] == CHALLENGE
            return exc.response.status_code

    assert asyncio.run(attempt()) == 401


def backbone_messages(backbone, last: int) -> list[Envelope]:
    """Every envelope the backbone sequenced, up to ``last``."""
    found: list[Envelope] = []
    with Client(backbone.address, give_up_after=10.0) as client:
        stream = client.subscribe(from_seq=1, on_loss="yield")
        deadline = time.monotonic() + 30
        seq = 0
        while seq < last and time.monotonic() < deadline:
            event = stream.get(timeout=1.0)
            if event is None or not hasattr(event, "data"):
                continue
            seq = event.seq
            envelope = decode(event.data)
            if envelope is not None:
                found.append(envelope)
        assert seq >= last
    return found


def test_nothing_a_refused_client_sends_reaches_the_backbone(gateway, alice, module_backbone):
    marker = f"refused-{os.getpid()}-{time.monotonic_ns()}".encode()
    for credentials in ([], ["-u", "alice:wrong"], ["-H", bearer(alice.token)]):
        subject = "prices.secret" if credentials else "prices.anonymous"
        status, _, _ = curl(*credentials, "--data-binary", marker.decode(), url(gateway, f"/v1/publish/{subject}"))
        assert status in (401, 403)
    status, _, body = curl("-H", bearer(alice.token), "--data-binary", "after", url(gateway, "/v1/publish/prices.ok"))
    assert status == 200
    assert not [e for e in backbone_messages(module_backbone, json.loads(body)["seq"]) if marker in e.data]


def test_sighup_rereads_the_users_file(module_backbone, tmp_path):
    keys = users(path=tmp_path / "users.json")
    process = GatewayProcess("http", module_backbone.address, tmp_path, ["--users", str(keys.path)]).start()
    try:
        carol = ["-u", "carol:carol's password"]
        assert curl("-H", bearer(keys.token), url(process, "/metrics"))[0] == 200
        assert curl(*carol, url(process, "/metrics"))[0] == 401
        file = keys.file
        del file.entries["alice"]
        file.entries["carol"] = Entry(User("carol", Permissions.of(["c.>"]), Permissions.of(["c.>"])),
                                      password=hash_secret("carol's password"))
        Path(keys.path).write_bytes(file.to_json())  # type: ignore[arg-type]
        os.kill(process.child.pid, signal.SIGHUP)  # type: ignore[union-attr]
        assert wait_until(lambda: curl(*carol, url(process, "/metrics"))[0] == 200, EVENT_WITHIN)
        assert curl("-H", bearer(keys.token), url(process, "/metrics"))[0] == 401  # alice is gone, token and all
        Path(keys.path).write_bytes(b"{ not json")
        os.kill(process.child.pid, signal.SIGHUP)  # type: ignore[union-attr]
        assert wait_until(lambda: "users file not re-read" in process.log_text(), EVENT_WITHIN)
        assert curl(*carol, url(process, "/metrics"))[0] == 200  # the previous users stay
        assert process.alive()
    finally:
        process.kill()


def test_without_users_the_gateway_says_so_and_stays_open(module_backbone, tmp_path):
    process = GatewayProcess("http", module_backbone.address, tmp_path).start()
    try:
        assert curl("--data-binary", "x", url(process, "/v1/publish/open.x"))[0] == 200
        assert curl(url(process, "/metrics"))[0] == 200
        assert "no --users: every client may publish and subscribe to everything" in process.log_text()
    finally:
        process.kill()
