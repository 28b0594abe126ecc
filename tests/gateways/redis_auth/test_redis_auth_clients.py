"""The Redis gateway with ``--users``, driven by unmodified clients: redis-cli, redis-py, ioredis; over TLS too.

The replies are compared byte for byte with a real redis-server given the
equivalent ACL file; a subscriber on the backbone checks that nothing a
refused client sends gets there; SIGHUP re-reads the users while clients stay
connected.
"""
from __future__ import annotations

import os
import signal
import socket
import ssl
import subprocess
import time
from pathlib import Path

import hiredis
import pytest
import redis
from node_clients import run_node
from redis.backoff import NoBackoff
from redis.retry import Retry
from redis_users_support import command, write_users

from fyrehose.drivers.client import Client
from fyrehose.runtime.process import ChildProcess

from gateway_support import GatewayProcess, module_backbone  # noqa: F401 - the module's backbone fixture
from support import EVENT_WITHIN, LOOPBACK, free_port, make_certificates, wait_until

SPEC = {
    "alice": {"password": "secret", "publish": {"allow": ["news.sports", "weather"]},
              "subscribe": {"allow": ["news.sports", "news.*", "weather"]}},
    "bob": {"password": "pw"},
}
# the same users for redis-server: channel rights are one list there, for PUBLISH and SUBSCRIBE alike
ACL = """user default off
user alice on >secret resetchannels &news.sports &news.* &weather ~* +@all
user bob on >pw allchannels ~* +@all
"""
NOPERM = "NOPERM this user has no permissions to access one of the channels used as arguments"
WRONGPASS = "WRONGPASS invalid username-password pair or user is disabled."
NOAUTH = "NOAUTH Authentication required."


@pytest.fixture(scope="module")
def users_file(tmp_path_factory) -> Path:
    return write_users(tmp_path_factory.mktemp("users") / "users.json", SPEC)


@pytest.fixture(scope="module")
def certificates(tmp_path_factory) -> dict[str, str]:
    """A CA, a server certificate for 127.0.0.1, and client certificates named alice and stranger (openssl)."""
    return make_certificates(tmp_path_factory.mktemp("tls"), ("alice", "stranger"))


@pytest.fixture(scope="module")
def started(module_backbone, tmp_path_factory):  # noqa: F811 - the fixture imported above
    """Gateways of this module by their options, each started once, all stopped by PID at the end."""
    processes: dict[tuple[str, ...], GatewayProcess] = {}
    log_dir = tmp_path_factory.mktemp("gateway-logs")

    def start(*extra: str) -> GatewayProcess:
        if extra not in processes:
            processes[extra] = GatewayProcess("redis", module_backbone.address, log_dir, list(extra)).start()
        return processes[extra]

    yield start
    for process in processes.values():
        process.kill()


@pytest.fixture(scope="module")
def gateway(started, users_file) -> GatewayProcess:
    return started("--users", str(users_file))


@pytest.fixture(scope="module")
def tls_gateway(started, users_file, certificates) -> GatewayProcess:
    return started("--users", str(users_file), "--tls-cert", certificates["server.pem"],
                   "--tls-key", certificates["server.key"])


@pytest.fixture(scope="module")
def certificate_gateway(started, users_file, certificates) -> GatewayProcess:
    return started("--users", str(users_file), "--tls-cert", certificates["server.pem"],
                   "--tls-key", certificates["server.key"], "--tls-ca", certificates["ca.pem"])


def connect(port: int, **options) -> redis.Redis:
    """A redis-py client that does not retry: by default it tries a refused login three more times (its
    AuthenticationError is a ConnectionError), and every try counts as a failure of the address."""
    return redis.Redis(host=LOOPBACK, port=port, retry=Retry(NoBackoff(), 0), **options)


def redis_cli(port: int, *args: str) -> str:
    result = subprocess.run(["redis-cli", "-h", LOOPBACK, "-p", str(port), *args], capture_output=True, text=True,
                            timeout=30)
    return (result.stdout + result.stderr).strip()


# ---------------------------------------------------------------- redis-cli

def test_redis_cli_with_user_and_password(gateway):
    login = ["--user", "alice", "--pass", "secret", "--no-auth-warning"]
    assert redis_cli(gateway.port, *login, "PUBLISH", "news.sports", "x") == "0"
    assert redis_cli(gateway.port, *login, "ACL", "WHOAMI") == "alice"
    assert redis_cli(gateway.port, *login, "PUBLISH", "orders.1", "x") == NOPERM
    assert redis_cli(gateway.port, *login, "SUBSCRIBE", "orders.1") == NOPERM
    assert redis_cli(gateway.port, *login, "PSUBSCRIBE", "news.sp*") == NOPERM
    wrong = redis_cli(gateway.port, "--user", "alice", "--pass", "guess", "--no-auth-warning", "PUBLISH", "news.sports", "x")
    assert f"AUTH failed: {WRONGPASS}" in wrong and NOAUTH in wrong
    assert redis_cli(gateway.port, "PUBLISH", "news.sports", "x") == NOAUTH
    default = redis_cli(gateway.port, "-a", "secret", "--no-auth-warning", "PING")  # no user named default here
    assert f"AUTH failed: {WRONGPASS}" in default and NOAUTH in default


# ---------------------------------------------------------------- redis-py

@pytest.mark.parametrize("protocol", [2, 3])
def test_redis_py_with_user_and_password(gateway, protocol):
    client = connect(gateway.port, username="alice", password="secret", protocol=protocol)
    assert client.execute_command("ACL", "WHOAMI") in (b"alice", "alice")
    pubsub = client.pubsub()
    pubsub.subscribe(f"news.{protocol}")
    assert pubsub.get_message(timeout=5)["type"] == "subscribe"
    assert client.publish("news.sports", b"x") == 0
    with pytest.raises(redis.exceptions.NoPermissionError, match=NOPERM.removeprefix("NOPERM ")):
        client.publish("orders.1", b"x")
    with pytest.raises(redis.exceptions.NoPermissionError, match=NOPERM.removeprefix("NOPERM ")):
        pubsub.psubscribe("news.s*")
        pubsub.get_message(timeout=5)
    pubsub.close()
    client.close()
    with pytest.raises(redis.exceptions.AuthenticationError, match="invalid username-password pair"):
        connect(gateway.port, username="alice", password="guess", protocol=protocol).ping()
    with pytest.raises(redis.exceptions.AuthenticationError, match="(Authentication required|HELLO must be called)"):
        connect(gateway.port).publish("news.sports", b"x")


# ---------------------------------------------------------------- ioredis

def test_ioredis_with_user_and_password(gateway):
    clear_failures(gateway)
    assert run_node("ioredis_auth_client.js", gateway.port).strip() == "ok"


# ---------------------------------------------------------------- byte for byte against redis-server

SCRIPT: list[tuple[list[bytes], int]] = [  # (command, replies it gets)
    ([b"PING"], 1), ([b"PUBLISH", b"news.sports", b"x"], 1), ([b"SUBSCRIBE", b"news.sports"], 1),
    ([b"PSUBSCRIBE", b"*"], 1), ([b"GET", b"weather"], 1), ([b"ACL", b"WHOAMI"], 1), ([b"HELLO", b"3"], 1),
    ([b"HELLO", b"4"], 1), ([b"HELLO", b"three"], 1), ([b"HELLO", b"03"], 1), ([b"HELLO", b"3", b"FOO"], 1),
    ([b"HELLO", b"3", b"AUTH", b"alice"], 1), ([b"HELLO", b"3", b"AUTH", b"alice", b"guess"], 1),
    ([b"AUTH"], 1), ([b"AUTH", b"a", b"b", b"c"], 1), ([b"AUTH", b"guess"], 1), ([b"AUTH", b"alice", b"guess"], 1),
    ([b"ACL", b"WHOAMI", b"x"], 1), ([b"PUBLISH", b"x"], 1),
    ([b"AUTH", b"alice", b"secret"], 1), ([b"AUTH", b"nobody", b"secret"], 1),  # a failed AUTH keeps the login
    ([b"ACL", b"WHOAMI"], 1), ([b"PUBLISH", b"news.sports", b"x"], 1),
    ([b"PUBLISH", b"orders", b"x"], 1), ([b"SUBSCRIBE", b"orders"], 1), ([b"SUBSCRIBE", b"weather", b"orders"], 1),
    ([b"PSUBSCRIBE", b"news.sp*"], 1), ([b"PSUBSCRIBE", b"*"], 1), ([b"PSUBSCRIBE", b"news.*"], 1),
    ([b"PSUBSCRIBE", b"weather"], 1), ([b"PUBLISH", b"orders", b"x"], 1), ([b"SUBSCRIBE", b"orders"], 1),
    ([b"SUBSCRIBE", b"news.sports", b"weather"], 2), ([b"PUNSUBSCRIBE", b"weather", b"news.*"], 2),
    ([b"UNSUBSCRIBE", b"news.sports", b"weather"], 2),
    ([b"AUTH", b"bob", b"pw"], 1), ([b"HELLO", b"3", b"AUTH", b"bob", b"pw", b"SETNAME", b"b"], 1),
    ([b"ACL", b"WHOAMI"], 1), ([b"PSUBSCRIBE", b"*"], 1), ([b"PUNSUBSCRIBE", b"*"], 1),
    ([b"PUBLISH", b"orders", b"x"], 1), ([b"QUIT"], 1),
]


def replies(port: int, script: list[tuple[list[bytes], int]]) -> list[bytes]:
    """Each command's replies as sent, the commands one at a time on one connection."""
    sock = socket.create_connection((LOOPBACK, port), timeout=10)
    reader, got = hiredis.Reader(), []
    for args, count in script:
        sock.sendall(command(*args))
        raw = b""
        for _ in range(count):
            while reader.gets() is False:
                chunk = sock.recv(65536)
                assert chunk, f"closed after {args}"
                raw += chunk
                reader.feed(chunk)
        got.append(raw)
    sock.close()
    return got


def redis_server_hello(reply: bytes) -> bytes:
    """A HELLO map names the server, its version and the client id: those are the server's own."""
    return reply if not reply.startswith(b"%7") else b"HELLO map"


def clear_failures(gateway: GatewayProcess, **options) -> None:
    """Every client here comes from 127.0.0.1: a login that succeeds clears the failures other tests left."""
    client = connect(gateway.port, username="bob", password="pw", **options)
    assert client.ping()
    client.close()


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory):
    """A real redis-server with the equivalent ACL file, stopped by its PID at the end; its port."""
    directory = tmp_path_factory.mktemp("redis-server")
    acl = directory / "users.acl"
    acl.write_text(ACL)
    port = free_port(socket.SOCK_STREAM)
    with ChildProcess(["redis-server", "--port", str(port), "--bind", LOOPBACK, "--save", "", "--appendonly", "no",
                       "--dir", str(directory), "--aclfile", str(acl)], directory / "redis-server.log"):
        assert wait_until(lambda: _listening(port), timeout=EVENT_WITHIN)
        yield port


def test_replies_are_redis_servers_byte_for_byte(gateway, redis_server):
    clear_failures(gateway)
    expected = [redis_server_hello(reply) for reply in replies(redis_server, SCRIPT)]
    got = [redis_server_hello(reply) for reply in replies(gateway.port, SCRIPT)]
    for (args, _), mine, theirs in zip(SCRIPT, got, expected):
        assert mine == theirs, args
    assert expected.count(b"HELLO map") == 1  # the one HELLO that got through


@pytest.mark.parametrize("sent", [command(b"PING", *[b"x"] * 10), b"*3\r\n$7\r\nPUBLISH\r\n$1\r\na\r\n$16385\r\n",
                                  command(b"PUBLISH", b"news.sports", b"x" * 16384)])
def test_an_unauthenticated_clients_limits_are_redis_servers(gateway, redis_server, sent):
    """Before a login, at most 10 arguments of 16 KiB: beyond, the error and the close."""
    assert _until_closed(gateway.port, sent) == _until_closed(redis_server, sent)


def _until_closed(port: int, data: bytes) -> bytes:
    sock = socket.create_connection((LOOPBACK, port), timeout=10)
    sock.sendall(data)
    got = b""
    try:
        while not got.endswith(b"\r\n") or got.startswith(b"-ERR Protocol"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            got += chunk
    except ConnectionResetError:
        pass
    sock.close()
    return got


def _listening(port: int) -> bool:
    try:
        socket.create_connection((LOOPBACK, port), timeout=1).close()
        return True
    except OSError:
        return False


# ---------------------------------------------------------------- nothing refused reaches the backbone

def test_nothing_a_refused_client_sends_reaches_the_backbone(gateway, module_backbone):  # noqa: F811
    clear_failures(gateway)
    with Client(module_backbone.address) as spy:
        stream = spy.subscribe(None)
        sock = socket.create_connection(gateway.address, timeout=10)
        refused = [command(b"PUBLISH", b"news.sports", b"leak-1"), command(b"SUBSCRIBE", b"leak.a"),
                   command(b"PSUBSCRIBE", b"leak.*"), command(b"GET", b"leak.b"),
                   command(b"AUTH", b"alice", b"guess"), command(b"PUBLISH", b"news.sports", b"leak-2"),
                   command(b"AUTH", b"alice", b"secret"), command(b"PUBLISH", b"leak.c", b"leak-3"),
                   command(b"SUBSCRIBE", b"leak.d"), command(b"PSUBSCRIBE", b"leak*"), command(b"GET", b"leak.e"),
                   command(b"PUBLISH", b"weather", b"the-end")]
        sock.sendall(b"".join(refused))
        reader, answers = hiredis.Reader(), []
        while len(answers) < len(refused):
            reader.feed(sock.recv(65536))
            while (reply := reader.gets()) is not False:
                answers.append(reply)
        assert answers[-1] == 0 and sum(isinstance(answer, hiredis.ReplyError) for answer in answers) == 10
        seen = []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            event = stream.get(timeout=1)
            if event is None:
                continue
            seen.append(bytes(event.data))  # whole datagrams: the envelope's subject and data
            if seen[-1].endswith(b"the-end"):
                break
        sock.close()
    assert seen and seen[-1].endswith(b"weatherthe-end")
    assert not [datagram for datagram in seen if b"leak" in datagram]


# ---------------------------------------------------------------- SIGHUP

def test_sighup_changes_a_password_and_a_right_while_clients_stay_connected(module_backbone, tmp_path):  # noqa: F811
    path = write_users(tmp_path / "users.json", SPEC)
    gateway = GatewayProcess("redis", module_backbone.address, tmp_path, ["--users", str(path)]).start()
    try:
        alice = connect(gateway.port, username="alice", password="secret")
        bob = connect(gateway.port, username="bob", password="pw")
        reader = connect(gateway.port, username="alice", password="secret").pubsub()
        assert alice.ping()  # connected (and logged in) before the users change
        reader.subscribe("news.sports", "weather")
        assert [reader.get_message(timeout=5)["type"] for _ in range(2)] == ["subscribe", "subscribe"]
        assert bob.publish("news.sports", b"before") == 1
        assert _next_data(reader) == b"before"
        write_users(path, {**SPEC, "alice": {"password": "new", "publish": {"allow": ["weather"]},
                                             "subscribe": {"allow": ["weather"]}}})
        os.kill(gateway.child.pid, signal.SIGHUP)
        assert wait_until(lambda: "users re-read" in gateway.output(), timeout=EVENT_WITHIN)
        bob.publish("news.sports", b"after")  # no longer alice's to read
        bob.publish("weather", b"marker")
        assert _next_data(reader) == b"marker"
        with pytest.raises(redis.exceptions.NoPermissionError):
            alice.publish("news.sports", b"x")  # the same connection, still open, with the new rights
        assert alice.publish("weather", b"y") == 1
        assert _next_data(reader) == b"y"
        with pytest.raises(redis.exceptions.AuthenticationError):
            connect(gateway.port, username="alice", password="secret").ping()
        assert connect(gateway.port, username="alice", password="new").ping()
        for client in (alice, bob):
            client.close()
        reader.close()
    finally:
        gateway.stop()


def _next_data(pubsub) -> bytes | None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        message = pubsub.get_message(timeout=1)
        if message is not None and message["type"] == "message":
            return message["data"]
    return None


# ---------------------------------------------------------------- TLS

def test_redis_cli_over_tls(tls_gateway, certificates):
    tls = ["--tls", "--cacert", certificates["ca.pem"], "--user", "alice", "--pass", "secret", "--no-auth-warning"]
    assert redis_cli(tls_gateway.port, *tls, "PUBLISH", "news.sports", "x") == "0"
    assert redis_cli(tls_gateway.port, *tls, "PUBLISH", "orders", "x") == NOPERM


def test_redis_py_over_tls(tls_gateway, certificates):
    client = connect(tls_gateway.port, ssl=True, ssl_ca_certs=certificates["ca.pem"], username="alice",
                     password="secret")
    assert client.publish("news.sports", b"x") == 0
    client.close()
    with pytest.raises(redis.exceptions.AuthenticationError):
        connect(tls_gateway.port, ssl=True, ssl_ca_certs=certificates["ca.pem"], username="alice",
                password="guess").ping()


def test_ioredis_over_tls(tls_gateway, certificates):
    clear_failures(tls_gateway, ssl=True, ssl_ca_certs=certificates["ca.pem"])
    assert run_node("ioredis_auth_client.js", tls_gateway.port, certificates["ca.pem"]).strip() == "ok"


def test_a_client_certificate_logs_in_as_the_user_it_names(certificate_gateway, certificates):
    cli = ["--tls", "--cacert", certificates["ca.pem"], "--cert", certificates["alice.pem"],
           "--key", certificates["alice.key"]]
    assert redis_cli(certificate_gateway.port, *cli, "ACL", "WHOAMI") == "alice"
    assert redis_cli(certificate_gateway.port, *cli, "PUBLISH", "orders", "x") == NOPERM
    client = connect(certificate_gateway.port, ssl=True, ssl_ca_certs=certificates["ca.pem"],
                     ssl_certfile=certificates["alice.pem"], ssl_keyfile=certificates["alice.key"])
    assert client.publish("news.sports", b"x") == 0
    client.close()
    stranger = ["--tls", "--cacert", certificates["ca.pem"], "--cert", certificates["stranger.pem"],
                "--key", certificates["stranger.key"]]
    assert redis_cli(certificate_gateway.port, *stranger, "PING") == NOAUTH  # a certificate that names no user
    with pytest.raises((ssl.SSLError, redis.exceptions.ConnectionError, ConnectionError)):
        connect(certificate_gateway.port, ssl=True, ssl_ca_certs=certificates["ca.pem"], username="alice",
                password="secret").ping()  # no certificate: no TLS
