"""The Lumberjack gateway with --users: the writer's client certificate names its user (pylogbeat, raw TLS frames).

Lumberjack carries no login: a writer whose certificate names no user is
closed before anything it sends is published; an event whose subject the
user may not publish to is not acked: the events before it are published
and acked, then the connection is closed.
"""
from __future__ import annotations

import os
import signal
import socket
import ssl
import threading
import time

import orjson
import pylogbeat
import pytest

from fyrehose import Client
from fyrehose.gateways.access.permissions import Permissions
from fyrehose.gateways.access.users import User
from fyrehose.gateways.lumberjack.protocol import decode_acks, encode_json, encode_window
from fyrehose.subjects.envelope import decode

from gateway_support import GatewayProcess
from http_users_support import certificates, users
from support import EVENT_WITHIN, LOOPBACK, wait_until


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> dict[str, str]:
    return certificates(tmp_path_factory.mktemp("lumberjack-tls"))


@pytest.fixture
def gateway(module_backbone, tmp_path, certs):
    keys = users(path=tmp_path / "users.json")
    process = GatewayProcess("lumberjack", module_backbone.address, tmp_path,
                             ["--users", str(keys.path), "--subject-field", "subject", "--tls-cert", certs["server.pem"],
                              "--tls-key", certs["server.key"], "--tls-ca", certs["ca.pem"]]).start()
    yield process
    process.kill()


class Recorder:
    """Every envelope the backbone delivers from now on."""

    def __init__(self, backbone) -> None:
        self.client = Client(backbone.address, give_up_after=3.0)
        self.stream = self.client.subscribe()
        self.envelopes: list = []
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self.client._closed:
            event = self.stream.get(timeout=0.5)
            if event is not None and hasattr(event, "data"):
                envelope = decode(event.data)
                if envelope is not None and not envelope.subject.startswith("_"):
                    self.envelopes.append(envelope)

    def documents(self) -> list[dict]:
        return [orjson.loads(envelope.data) for envelope in list(self.envelopes)]

    def close(self) -> None:
        self.client.close()
        self._thread.join(5)


@pytest.fixture
def recorder(module_backbone):
    recording = Recorder(module_backbone)
    yield recording
    recording.close()


def beats(gateway: GatewayProcess, certs: dict[str, str], name: str | None) -> pylogbeat.PyLogBeatClient:
    tls = {"ssl_enable": True, "ssl_verify": True, "ca_certs": certs["ca.pem"]}
    if name is not None:
        tls |= {"certfile": certs[f"{name}.pem"], "keyfile": certs[f"{name}.key"]}
    return pylogbeat.PyLogBeatClient(LOOPBACK, gateway.port, timeout=20, **tls)


def tls_exchange(gateway: GatewayProcess, certs: dict[str, str], name: str, data: bytes,
                 timeout: float = 15.0, until_ack: int | None = None) -> tuple[list[int], bool]:
    """Send raw frames over TLS with ``name``'s certificate; (acked sequences, closed by the gateway), until the
    gateway closes or acks ``until_ack``."""
    context = ssl.create_default_context(cafile=certs["ca.pem"])
    context.load_cert_chain(certs[f"{name}.pem"], certs[f"{name}.key"])
    acks: list[int] = []
    received = b""
    with context.wrap_socket(socket.create_connection(gateway.address, timeout=timeout),
                             server_hostname=LOOPBACK) as sock:
        sock.sendall(data)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                chunk = sock.recv(4096)
            except (ConnectionResetError, ssl.SSLError):
                return acks, True
            if not chunk:
                return acks, True
            received += chunk
            usable = len(received) - len(received) % 6
            acks += [seq for _, seq in decode_acks(received[:usable]) if seq]
            received = received[usable:]
            if until_ack is not None and until_ack in acks:
                return acks, False
    raise AssertionError(f"the gateway did not close within {timeout} s; acks {acks}")


def test_the_certificate_names_the_user_who_publishes(gateway, certs, recorder):
    with beats(gateway, certs, "alice") as client:
        client.send([{"subject": "prices.acme", "n": n} for n in range(3)])
    assert wait_until(lambda: len(recorder.documents()) == 3, EVENT_WITHIN)
    assert [envelope.subject for envelope in recorder.envelopes] == ["prices.acme"] * 3


def test_a_certificate_naming_no_user_publishes_nothing(gateway, certs, recorder):
    with pytest.raises((OSError, pylogbeat.ConnectionException)):
        with beats(gateway, certs, "mallory") as client:
            client.send([{"subject": "prices.acme", "from": "mallory"}])
    assert wait_until(lambda: "names no user (mallory)" in gateway.output(), EVENT_WITHIN)
    with beats(gateway, certs, "alice") as client:  # a marker after: what mallory sent would have come before it
        client.send([{"subject": "prices.acme", "from": "alice"}])
    assert wait_until(lambda: {"subject": "prices.acme", "from": "alice"} in recorder.documents(), EVENT_WITHIN)
    assert all(document.get("from") != "mallory" for document in recorder.documents())


def test_without_a_certificate_the_handshake_fails(gateway, certs):
    with pytest.raises((OSError, pylogbeat.ConnectionException)):
        with beats(gateway, certs, None) as client:
            client.send([{"subject": "prices.acme"}])


def test_an_event_outside_the_rights_is_not_acked_and_ends_the_connection(gateway, certs, recorder):
    frames = (encode_window(3) + encode_json(1, orjson.dumps({"subject": "prices.a", "n": 1}))
              + encode_json(2, orjson.dumps({"subject": "prices.secret", "n": 2}))
              + encode_json(3, orjson.dumps({"subject": "prices.b", "n": 3})))
    acks, closed = tls_exchange(gateway, certs, "alice", frames)
    assert closed and acks == [1]  # the event before the refused one is published and acked; nothing after
    assert wait_until(lambda: {"subject": "prices.a", "n": 1} in recorder.documents(), EVENT_WITHIN)
    assert wait_until(lambda: "no permission to publish to prices.secret" in gateway.output(), EVENT_WITHIN)
    with beats(gateway, certs, "alice") as client:  # a marker: anything of the refused connection came before it
        client.send([{"subject": "prices.c", "n": 4}])
    assert wait_until(lambda: {"subject": "prices.c", "n": 4} in recorder.documents(), EVENT_WITHIN)
    assert [document["n"] for document in recorder.documents()] == [1, 4]


def test_max_clients_per_address(module_backbone, tmp_path, certs):
    process = GatewayProcess("lumberjack", module_backbone.address, tmp_path,
                             ["--max-clients-per-address", "1"]).start()
    try:
        first = socket.create_connection(process.address, timeout=10)
        second = socket.create_connection(process.address, timeout=10)
        assert second.recv(1) == b""  # closed at once
        assert wait_until(lambda: "--max-clients-per-address" in process.output(), EVENT_WITHIN)
        first.close()
        second.close()
    finally:
        process.kill()


def test_without_users_it_says_so(module_backbone, tmp_path):
    process = GatewayProcess("lumberjack", module_backbone.address, tmp_path).start()
    try:
        assert wait_until(lambda: "no --users: every client may publish and subscribe to everything"
                          in process.output(), EVENT_WITHIN)
    finally:
        process.kill()


def test_sighup_rereads_the_rights(module_backbone, tmp_path, certs, recorder):
    keys = users(path=tmp_path / "users.json")
    process = GatewayProcess("lumberjack", module_backbone.address, tmp_path,
                             ["--users", str(keys.path), "--subject-field", "subject", "--tls-cert", certs["server.pem"],
                              "--tls-key", certs["server.key"], "--tls-ca", certs["ca.pem"]]).start()
    try:
        assert tls_exchange(process, certs, "alice", encode_window(1) + encode_json(
            1, orjson.dumps({"subject": "prices.before", "n": 1})), timeout=15, until_ack=1) == ([1], False)
        alice = keys.file.entries["alice"]
        alice.user = User("alice", Permissions.of(["other.>"]), alice.user.subscribe)
        keys.path.write_bytes(keys.file.to_json())  # type: ignore[union-attr]
        os.kill(process.child.pid, signal.SIGHUP)  # type: ignore[union-attr]
        assert wait_until(lambda: "users re-read" in process.output(), EVENT_WITHIN)
        acks, closed = tls_exchange(process, certs, "alice", encode_window(1) + encode_json(
            1, orjson.dumps({"subject": "prices.after", "n": 2})))
        assert closed and acks == []
        assert wait_until(lambda: {"subject": "prices.before", "n": 1} in recorder.documents(), EVENT_WITHIN)
        assert all(document["n"] != 2 for document in recorder.documents())
    finally:
        process.kill()
