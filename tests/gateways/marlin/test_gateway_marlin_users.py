"""The Marlin gateway with --users: a Python ssl client's certificate names its user; rights as RESPONSE ERRORs.

Marlin carries no login, so the client certificate (``--tls-ca``) names the
user; a client that cannot be placed gets a RESPONSE ERROR and is closed.
"""
from __future__ import annotations

import socket
import ssl
from collections import Counter

import pytest

from fyrehose.gateways.access.login import Access, Login
from fyrehose.gateways.marlin.connection import MarlinConnection, MarlinRoutes, place

from gateway_support import GatewayProcess, MarlinClient
from http_users_support import certificates, users
from support import LOOPBACK


class TlsMarlinClient(MarlinClient):
    """The blocking Marlin client of the other tests, over Python's ssl (with a client certificate, or none)."""

    def __init__(self, address: tuple[str, int], certs: dict[str, str], name: str | None) -> None:
        context = ssl.create_default_context(cafile=certs["ca.pem"])
        if name is not None:
            context.load_cert_chain(certs[f"{name}.pem"], certs[f"{name}.key"])
        raw = socket.create_connection(address, timeout=10)
        self.sock = context.wrap_socket(raw, server_hostname=LOOPBACK)
        self.buffer = bytearray()


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> dict[str, str]:
    return certificates(tmp_path_factory.mktemp("marlin-tls"))


def start(backbone, directory, certs, *, anonymous: bool = False, client_certificates: bool = True) -> GatewayProcess:
    keys = users(path=directory / "users.json", anonymous=anonymous)
    tls = ["--tls-cert", certs["server.pem"], "--tls-key", certs["server.key"]]
    if client_certificates:
        tls += ["--tls-ca", certs["ca.pem"]]
    return GatewayProcess("marlin", backbone.address, directory, ["--users", str(keys.path), *tls]).start()


def test_the_certificate_names_the_user_and_the_rights_hold(module_backbone, tmp_path, certs):
    gateway = start(module_backbone, tmp_path, certs)
    try:
        alice = TlsMarlinClient(gateway.address, certs, "alice")
        other = TlsMarlinClient(gateway.address, certs, "alice")
        alice.subscribe(b"prices.acme")
        assert alice.read() == ("response", True, b"prices.acme")
        alice.subscribe(b"bob.inbox")
        kind, ok, text = alice.read()
        assert (kind, ok) == ("response", False) and b"permission denied" in text and b"alice" in text
        other.publish(b"prices.secret", b"no", message_id=5)
        kind, ok, text = other.read()
        assert (kind, ok) == ("response", False) and b"message 5 not published: permission denied" in text
        other.publish(b"prices.acme", b"yes", message_id=6)
        frame = alice.read()
        assert frame[0] == "message" and frame[2:] == (b"prices.acme", b"yes")
        alice.subscribe(b"news.today")  # the connection stayed open through the refusals
        assert alice.read() == ("response", True, b"news.today")
        alice.close()
        other.close()
    finally:
        gateway.kill()


def test_a_certificate_naming_no_user_gets_an_error_and_is_closed(module_backbone, tmp_path, certs):
    gateway = start(module_backbone, tmp_path, certs, anonymous=True)
    try:
        mallory = TlsMarlinClient(gateway.address, certs, "mallory")
        kind, ok, text = mallory.read()
        assert (kind, ok) == ("response", False) and b"names no user (mallory)" in text
        assert mallory.read() is None  # closed
        mallory.close()
        assert "refused" in gateway.log_text()
    finally:
        gateway.kill()


def test_without_a_certificate_the_handshake_fails(module_backbone, tmp_path, certs):
    gateway = start(module_backbone, tmp_path, certs)
    try:
        with pytest.raises((ssl.SSLError, OSError)):
            client = TlsMarlinClient(gateway.address, certs, None)
            client.subscribe(b"prices.acme")  # TLS 1.3: the refusal may come with the first read
            assert client.read() is None
            raise ConnectionError("closed")
    finally:
        gateway.kill()


def test_without_client_certificates_only_the_anonymous_user_gets_in(module_backbone, tmp_path, certs):
    (tmp_path / "closed").mkdir()
    closed = start(module_backbone, tmp_path / "closed", certs, client_certificates=False)
    try:
        client = TlsMarlinClient(closed.address, certs, None)
        kind, ok, text = client.read()
        assert (kind, ok) == ("response", False) and b"authentication required" in text
        assert client.read() is None
        client.close()
    finally:
        closed.kill()
    (tmp_path / "open").mkdir()
    guests = start(module_backbone, tmp_path / "open", certs, anonymous=True, client_certificates=False)
    try:
        guest = TlsMarlinClient(guests.address, certs, None)
        guest.subscribe(b"public.news")
        assert guest.read() == ("response", True, b"public.news")
        guest.publish(b"public.news", b"x", message_id=1)  # the anonymous user publishes nothing
        assert guest.read()[:2] == ("response", False)
        guest.close()
    finally:
        guests.kill()


def test_placing_is_pure():
    keys = users(anonymous=False)
    access = Access(keys.file)
    assert place(Login(access, "a"), "alice") is None
    assert "names no user" in place(Login(access, "a"), "mallory")  # type: ignore[operator]
    assert "authentication required" in place(Login(access, "a"), None)  # type: ignore[operator]
    refused = MarlinConnection(MarlinRoutes(), None, Counter(), login=Login(access, "a"),  # type: ignore[arg-type]
                               refusal="authentication required: x")
    assert refused.outbox.closing is not None and b"authentication required: x" in refused.outbox.take()


def test_deliveries_follow_a_reread_users_file():
    from fyrehose.gateways.access.permissions import Permissions
    from fyrehose.gateways.access.users import User, UsersFile
    from fyrehose.gateways.marlin import protocol as proto
    from fyrehose.subjects.interest import LocalInterest

    class Deployment:
        interest = LocalInterest("test")
        position = 0

    keys = users()
    access = Access(keys.file)
    login = Login(access, "a")
    assert place(login, "alice") is None
    connection = MarlinConnection(MarlinRoutes(), Deployment(), Counter(), login=login)  # type: ignore[arg-type]
    connection.receive(proto.encode(proto.Subscribe(b"prices.acme")), 0.0)
    assert connection.outbox.take() == proto.encode(proto.Response(True, b"prices.acme"))
    frame = proto.message_frame(1, b"prices.acme", b"x")
    connection.deliver(1, frame, "prices.acme")
    assert connection.outbox.take() == frame
    entries = dict(keys.file.entries)
    entries["alice"].user = User("alice", Permissions.of(["prices.>"]), Permissions.of(["news.*"]))
    access.replace(UsersFile(entries))
    connection.deliver(2, proto.message_frame(2, b"prices.acme", b"y"), "prices.acme")
    assert connection.outbox.take() == b""
