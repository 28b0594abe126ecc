"""The NATS gateway with --users and TLS, driven by unmodified nats-py and nats.js, compared with nats-server.

The same users (passwords and rights) are given to a real nats-server as its
authorization block, and the bytes each answers to the same raw operations
are compared: the ``-ERR`` lines must be nats-server's own.
"""
from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import ssl

import nats
import pytest
from nats_users_support import RIGHTS, nats_server_authorization, write_users
from node_clients import run_node

from fyrehose.drivers.client import Client
from fyrehose.runtime.process import ChildProcess

from gateway_support import GatewayProcess
from support import EVENT_WITHIN, LOOPBACK, free_port, make_certificates, take, wait_until

PASSWORDS = {name: password for name, (password, _, _) in RIGHTS.items()}


async def error_texts(errors: list, count: int) -> list[str]:
    """The server's errors nats-py reported, lowercased as nats-py gives them, once ``count`` came (at most 10 s)."""
    for _ in range(200):
        if len(errors) >= count:
            break
        await asyncio.sleep(0.05)
    return [str(error).lower() for error in errors]


def run(coroutine):
    return asyncio.run(asyncio.wait_for(coroutine, 60))


@pytest.fixture(scope="module")
def certificates(tmp_path_factory) -> dict[str, str]:
    """A CA, a server certificate for 127.0.0.1 (and localhost: nats.js names it so), and client certificates named svc (a user) and stranger (none)."""
    return make_certificates(tmp_path_factory.mktemp("nats-tls"), ("svc", "stranger"), san="IP:127.0.0.1,DNS:localhost")


@pytest.fixture(scope="module")
def users(tmp_path_factory) -> tuple[str, dict[str, str]]:
    """The users file's path and each user's token."""
    path = tmp_path_factory.mktemp("nats-users") / "users.json"
    return str(path), write_users(path)


@pytest.fixture(scope="module")
def gateway(module_backbone, users, tmp_path_factory):
    process = GatewayProcess("nats", module_backbone.address, tmp_path_factory.mktemp("nats-users-logs"),
                             ["--users", users[0]]).start()
    yield process
    process.kill()


@pytest.fixture
def gateway_factory(module_backbone, tmp_path):
    started: list[GatewayProcess] = []

    def start(*extra: str) -> GatewayProcess:
        process = GatewayProcess("nats", module_backbone.address, tmp_path, list(extra)).start()
        started.append(process)
        return process

    yield start
    for process in started:
        process.kill()


def url(process: GatewayProcess, scheme: str = "nats") -> str:
    return f"{scheme}://{LOOPBACK}:{process.port}"


# ---------------------------------------------------------------- nats-py


def test_nats_py_logs_in_with_a_password_and_with_a_token(gateway, users):
    async def scenario():
        alice = await nats.connect(url(gateway), user="alice", password="secret")
        bob = await nats.connect(url(gateway), token=users[1]["bob"])
        subscription = await bob.subscribe("orders.>")
        await bob.flush()
        await alice.publish("orders.eu", b"from alice")
        await alice.flush()
        message = await subscription.next_msg(timeout=10)
        assert (message.subject, message.data) == ("orders.eu", b"from alice")
        await alice.close()
        await bob.close()

    run(scenario())


@pytest.mark.parametrize("credentials", [{"user": "alice", "password": "wrong"}, {"token": "fh_0011223344556677_x"},
                                         {}])
def test_nats_py_with_wrong_or_no_credentials_is_refused(gateway_factory, users, credentials):
    gateway = gateway_factory("--users", users[0])  # its own: failed logins slow down the address

    async def scenario():
        errors: list[Exception] = []

        async def error_cb(error: Exception) -> None:
            errors.append(error)

        with pytest.raises(Exception) as refused:
            await nats.connect(url(gateway), allow_reconnect=False, max_reconnect_attempts=0, connect_timeout=10,
                               error_cb=error_cb, **credentials)
        assert "authorization violation" in (str(refused.value) + "".join(map(str, errors))).lower()

    run(scenario())


def test_a_permissions_violation_reaches_nats_py_error_cb_and_the_connection_stays_open(gateway, module_backbone):
    async def scenario():
        errors: list[Exception] = []

        async def error_cb(error: Exception) -> None:
            errors.append(error)

        alice = await nats.connect(url(gateway), user="alice", password="secret", error_cb=error_cb)
        await alice.publish("other.subject", b"refused")
        await alice.subscribe("other.subject")
        await alice.publish("orders.marker", b"allowed")
        await alice.flush()
        texts = await error_texts(errors, 2)
        assert any('permissions violation for publish to "other.subject"' in text for text in texts), texts
        assert any('permissions violation for subscription to "other.subject"' in text for text in texts), texts
        assert alice.is_connected
        await alice.close()

    with Client(module_backbone.addr) as watcher:  # the backbone itself: what reached it
        stream = watcher.subscribe(">")
        run(scenario())
        seen = [event.envelope.subject for event in take(stream, 1, timeout=10)]
        seen += [event.envelope.subject for event in take(stream, 5, timeout=1)]
    assert "orders.marker" in seen and "other.subject" not in seen


def test_a_subscription_overlapping_a_deny_does_not_receive_the_denied_subjects(gateway):
    async def scenario():
        alice = await nats.connect(url(gateway), user="alice", password="secret")  # orders.secret.> denied
        bob = await nats.connect(url(gateway), user="bob", password="hunter2")
        everything = await alice.subscribe("orders.>")
        await alice.flush()
        for subject in ("orders.secret.plans", "orders.public", "orders.secret.x.y", "orders.last"):
            await bob.publish(subject, subject.encode())
        await bob.flush()
        assert [(await everything.next_msg(timeout=10)).subject for _ in range(2)] == ["orders.public", "orders.last"]
        with pytest.raises(nats.errors.TimeoutError):
            await everything.next_msg(timeout=0.5)
        await alice.close()
        await bob.close()

    run(scenario())


def test_a_request_is_answered_by_a_responder_without_publish_rights_to_the_inbox(gateway):
    async def scenario():
        responder = await nats.connect(url(gateway), user="svc", password="svcpw")  # publishes svc.status only

        async def answer(message) -> None:
            await message.respond(b"pong:" + message.data)

        await responder.subscribe("svc.ping", cb=answer)
        await responder.flush()
        alice = await nats.connect(url(gateway), user="alice", password="secret")
        reply = await alice.request("svc.ping", b"1", timeout=10)
        assert reply.data == b"pong:1"
        await alice.close()
        await responder.close()

    run(scenario())


def test_sighup_reload_applies_new_rights_to_connected_clients(module_backbone, tmp_path, gateway_factory):
    path = tmp_path / "users.json"
    write_users(path)
    process = gateway_factory("--users", str(path))

    async def scenario():
        errors: list[Exception] = []

        async def error_cb(error: Exception) -> None:
            errors.append(error)

        alice = await nats.connect(url(process), user="alice", password="secret", error_cb=error_cb)
        subscription = await alice.subscribe("orders.eu")
        await alice.publish("orders.eu", b"before")
        assert (await subscription.next_msg(timeout=10)).data == b"before"
        narrowed = dict(RIGHTS, alice=("secret", (["svc.>"], []), (["svc.>"], [])))
        write_users(path, rights=narrowed)
        os.kill(process.child.pid, signal.SIGHUP)
        wait_until(lambda: "users re-read" in process.log_text(), EVENT_WITHIN, "the reload")
        await alice.publish("orders.eu", b"after")
        await alice.flush()
        texts = await error_texts(errors, 2)
        assert any('permissions violation for publish to "orders.eu"' in text for text in texts), texts
        assert alice.is_connected  # the connection stayed open through the reload
        await alice.close()

    run(scenario())


# ---------------------------------------------------------------- nats.js


def test_nats_js_user_password_token_wrong_credentials_and_a_violation(gateway, users):
    assert run_node("nats_users_client.js", gateway.port, users[1]["bob"]).strip() == "ok"


# ---------------------------------------------------------------- TLS


def client_context(certificates: dict[str, str], name: str | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=certificates["ca.pem"])
    if name is not None:
        context.load_cert_chain(certificates[f"{name}.pem"], certificates[f"{name}.key"])
    return context


def test_tls_after_info_with_nats_py_and_nats_js(gateway_factory, users, certificates):
    process = gateway_factory("--users", users[0], "--tls-cert", certificates["server.pem"],
                              "--tls-key", certificates["server.key"])
    info = _info(process.port)
    assert info["tls_required"] is True and info["auth_required"] is True

    async def scenario():
        client = await nats.connect(url(process, "tls"), user="alice", password="secret",
                                    tls=client_context(certificates))
        subscription = await client.subscribe("orders.tls")
        await client.publish("orders.tls", b"secret payload")
        assert (await subscription.next_msg(timeout=10)).data == b"secret payload"
        await client.close()

    run(scenario())
    assert run_node("nats_users_client.js", process.port, users[1]["bob"], certificates["ca.pem"]).strip() == "ok"


def test_a_client_that_does_not_start_tls_gets_nothing(gateway_factory, users, certificates):
    process = gateway_factory("--users", users[0], "--tls-cert", certificates["server.pem"],
                              "--tls-key", certificates["server.key"])
    with socket.create_connection((LOOPBACK, process.port), timeout=10) as sock:
        assert _read_line(sock).startswith(b"INFO ")
        sock.sendall(b'CONNECT {"user":"alice","pass":"secret"}\r\nPUB orders.plain 1\r\nx\r\nPING\r\n')
        rest = b""
        try:
            while chunk := sock.recv(4096):
                rest += chunk
        except ConnectionResetError:
            pass
    assert b"PONG" not in rest
    wait_until(lambda: "TLS handshake failed" in process.log_text(), EVENT_WITHIN, "the failed handshake logged")


def test_the_client_certificate_names_the_user(gateway_factory, users, certificates):
    process = gateway_factory("--users", users[0], "--tls-cert", certificates["server.pem"],
                              "--tls-key", certificates["server.key"], "--tls-ca", certificates["ca.pem"])
    assert _info(process.port)["tls_verify"] is True

    async def scenario():
        errors: list[Exception] = []

        async def error_cb(error: Exception) -> None:
            errors.append(error)

        svc = await nats.connect(url(process, "tls"), tls=client_context(certificates, "svc"), error_cb=error_cb)
        subscription = await svc.subscribe("svc.status")
        await svc.publish("svc.status", b"up")  # svc's right
        assert (await subscription.next_msg(timeout=10)).data == b"up"
        await svc.publish("orders.x", b"not svc's")
        await svc.flush()
        for _ in range(200):
            if errors:
                break
            await asyncio.sleep(0.05)
        assert 'permissions violation for publish to "orders.x"' in str(errors[0]).lower()
        await svc.close()
        with pytest.raises(Exception) as refused:  # a certificate the CA signed, for no user
            await nats.connect(url(process, "tls"), tls=client_context(certificates, "stranger"),
                               allow_reconnect=False, max_reconnect_attempts=0, connect_timeout=10)
        assert "authorization violation" in str(refused.value).lower()
        with pytest.raises((OSError, nats.errors.Error, asyncio.TimeoutError)):  # no certificate: no handshake
            await nats.connect(url(process, "tls"), tls=client_context(certificates), allow_reconnect=False,
                               max_reconnect_attempts=0, connect_timeout=10)

    run(scenario())
    assert run_node("nats_cert_client.js", process.port, certificates["ca.pem"], certificates["svc.pem"],
                    certificates["svc.key"]).strip() == "ok"


def test_tls_handshake_first(gateway_factory, users, certificates):
    process = gateway_factory("--users", users[0], "--tls-cert", certificates["server.pem"],
                              "--tls-key", certificates["server.key"], "--tls-handshake-first")

    async def scenario():
        client = await nats.connect(url(process, "tls"), user="bob", password="hunter2",
                                    tls=client_context(certificates), tls_handshake_first=True)
        subscription = await client.subscribe("first.tls")
        await client.publish("first.tls", b"x")
        assert (await subscription.next_msg(timeout=10)).data == b"x"
        await client.close()

    run(scenario())


def _read_line(sock: socket.socket) -> bytes:
    data = b""
    while not data.endswith(b"\r\n"):
        chunk = sock.recv(1)
        assert chunk, "closed before a whole line"
        data += chunk
    return data


def _info(port: int) -> dict:
    import json

    with socket.create_connection((LOOPBACK, port), timeout=10) as sock:
        line = _read_line(sock)
    assert line.startswith(b"INFO ")
    return json.loads(line[5:])


# ---------------------------------------------------------------- byte for byte against nats-server


def _answers(port: int, operations: bytes) -> bytes:
    """Everything the server sends after INFO in reply to ``operations``, until it closes or PONGs."""
    with socket.create_connection((LOOPBACK, port), timeout=10) as sock:
        _read_line(sock)
        sock.sendall(operations)
        data = b""
        try:
            for _ in range(1000):
                chunk = sock.recv(65536)
                if not chunk:
                    break
                data += chunk
                if data.endswith(b"PONG\r\n"):
                    break
        except ConnectionResetError:
            pass
    return data


@pytest.fixture(scope="module")
def nats_server(tmp_path_factory):
    """A real nats-server with the same users and rights as the users file; its port."""
    binary = shutil.which("nats-server", path="/usr/sbin:/usr/bin:/sbin:/usr/local/bin")
    assert binary, "nats-server is missing: tools/bootstrap --test installs tools/test-packages.txt"
    directory = tmp_path_factory.mktemp("nats-server-users")
    port = free_port(socket.SOCK_STREAM)
    config = directory / "nats-server.conf"
    config.write_text(f"listen: {LOOPBACK}:{port}\n" + nats_server_authorization())
    with ChildProcess([binary, "-c", str(config)], directory / "nats-server.log") as server:
        def serves() -> bool:
            assert server.alive(), server.output()
            try:
                return _answers(port, b'CONNECT {"user":"bob","pass":"hunter2"}\r\nPING\r\n').endswith(b"PONG\r\n")
            except OSError:
                return False

        wait_until(serves, EVENT_WITHIN, "nats-server")
        yield port


COMPARED = [
    b"PING\r\n",
    b"SUB orders.x 1\r\nPING\r\n",
    b'CONNECT {"verbose":false,"user":"alice","pass":"wrong"}\r\nPING\r\n',
    b'CONNECT {"verbose":false,"user":"nobody","pass":"secret"}\r\nPING\r\n',
    b'CONNECT {"verbose":false}\r\nPING\r\n',
    b'CONNECT {"verbose":false,"pass":"secret"}\r\nPING\r\n',
    b'CONNECT {"verbose":false,"user":"alice","pass":"secret","account":"other"}\r\nPING\r\n',
    b'CONNECT {"verbose":false,"user":"alice","pass":"secret","tls_required":true}\r\n'
    b"PUB other 1\r\nx\r\nPUB orders.audit 1\r\nx\r\nSUB other 1\r\nSUB orders.secret.x q 2\r\nSUB > 3\r\n"
    b"SUB orders.> 4\r\nPING\r\n",
    b'CONNECT {"verbose":true,"user":"svc","pass":"svcpw"}\r\nSUB svc.x 1\r\nPUB svc.x 1\r\nx\r\n'
    b"PUB svc.status 2\r\nup\r\nSUB orders.> q 2\r\nPING\r\n",
]


@pytest.mark.parametrize("operations", COMPARED, ids=range(len(COMPARED)))
def test_errors_are_nats_servers_byte_for_byte(gateway_factory, users, nats_server, operations):
    gateway = gateway_factory("--users", users[0])  # its own: failed logins slow down the address
    assert _answers(gateway.port, operations) == _answers(nats_server, operations)


def test_without_users_credentials_in_connect_are_ignored_as_nats_server_ignores_them(gateway_factory):
    process = gateway_factory()
    assert "auth_required" not in _info(process.port)
    assert _answers(process.port, b'CONNECT {"verbose":false,"user":"x","pass":"y","auth_token":"z",'
                                  b'"tls_required":true}\r\nPING\r\n') == b"PONG\r\n"


def test_the_handshake_timeout_is_nats_servers_authentication_timeout(gateway_factory, users):
    process = gateway_factory("--users", users[0], "--handshake-timeout", "0.5")
    assert _answers(process.port, b"") == b"-ERR 'Authentication Timeout'\r\n"
