"""``fyrehose users`` and what every gateway kind does with ``--users``: the start line, a bad file, SIGHUP, limits."""
from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess

import pytest

from fyrehose.gateways.access.users import UsersFile

from support import EVENT_WITHIN, FYREHOSE, wait_until

NO_USERS = "no --users: every client may publish and subscribe to everything"


def users(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(FYREHOSE + ["users", *args], input=stdin, capture_output=True, text=True, timeout=60)


def test_the_command_keeps_hashes_only_and_lists_rights_never_secrets(tmp_path):
    path = tmp_path / "users.json"
    added = users("add", "--file", str(path), "--user", "alice", "--password-stdin", "--publish", "orders.>",
                  "--deny-publish", "orders.audit", stdin="s3cret-pass\n")
    assert added.returncode == 0, added.stderr
    token = users("add", "--file", str(path), "--user", "bot", "--token")
    assert token.returncode == 0 and token.stdout.startswith("fh_"), token.stderr
    assert users("add", "--file", str(path), "--user", "guest", "--anonymous", "--subscribe", "public.>",
                 "--deny-publish", ">").returncode == 0
    text = path.read_text()
    assert "s3cret-pass" not in text and token.stdout.strip() not in text
    assert token.stdout.strip().split("_", 2)[2] not in text
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    loaded = UsersFile.from_json(path.read_bytes())
    assert loaded.anonymous == "guest" and set(loaded.entries) == {"alice", "bot", "guest"}
    listing = users("list", "--file", str(path))
    assert listing.returncode == 0
    assert listing.stdout.splitlines() == [
        "alice\tpassword\tpublish orders.> but not orders.audit; subscribe everything",
        "bot\t1 token\tpublish everything; subscribe everything",
        "guest\tanonymous\tpublish everything but not >; subscribe public.>",
    ]
    assert "scrypt" not in listing.stdout
    assert users("remove", "--file", str(path), "--user", "guest").returncode == 0
    assert UsersFile.from_json(path.read_bytes()).anonymous is None


@pytest.mark.parametrize("args, stdin, message", [
    (["add", "--user", "a b", "--token"], None, "bad user name"),
    (["add", "--user", "a", "--token", "--publish", "a.>.b"], None, "bad subject pattern"),
    (["add", "--user", "a"], None, "no terminal to ask for the password"),
    (["add", "--user", "a", "--password-stdin"], "", "no password on stdin"),
    (["add", "--user", "a", "--password-stdin", "--no-password"], "x\n", "exclude each other"),
    (["remove", "--user", "ghost"], None, "no user ghost"),
])
def test_the_command_refuses_bad_input_in_one_line(tmp_path, args, stdin, message):
    path = tmp_path / "users.json"
    path.write_text(json.dumps({"fyrehose_users": 1, "users": {}}))
    result = users(args[0], "--file", str(path), *args[1:], stdin=stdin)
    assert result.returncode != 0
    assert result.stderr.count("\n") == 1 and message in result.stderr, result.stderr


def test_list_of_a_broken_file_is_one_line(tmp_path):
    path = tmp_path / "users.json"
    path.write_text("{")
    result = users("list", "--file", str(path))
    assert result.returncode != 0 and result.stderr.count("\n") == 1 and "not JSON" in result.stderr



@pytest.mark.parametrize("kind", ["redis", "nats", "marlin", "http"])
def test_a_gateway_without_users_says_so_in_one_line_at_start(gateway_factory, kind):
    gateway = gateway_factory(kind)
    wait_until(lambda: NO_USERS in gateway.log_text(), timeout=EVENT_WITHIN, what="the no --users line")


def test_a_gateway_with_a_bad_users_file_does_not_start_and_says_why(module_backbone, tmp_path):
    path = tmp_path / "users.json"
    path.write_text('{"fyrehose_users": 1, "users": {"a": {"password": "clear text"}}}')
    result = subprocess.run(FYREHOSE + ["gateway", "redis", "--listen", "127.0.0.1:0", "--backbone",
                                        module_backbone.address, "--users", str(path)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert result.stderr.strip().endswith("user 'a': not a scrypt hash (scrypt$N$r$p$salt$hash)"), result.stderr


def test_sighup_re_reads_the_file_and_a_bad_one_keeps_the_users(gateway_factory, tmp_path):
    path = tmp_path / "users.json"
    assert users("add", "--file", str(path), "--user", "alice", "--token").returncode == 0
    gateway = gateway_factory("redis", "--users", str(path))
    wait_until(lambda: "users from" in gateway.log_text(), timeout=EVENT_WITHIN, what="the users line")
    assert users("add", "--file", str(path), "--user", "bob", "--token").returncode == 0
    os.kill(gateway.child.pid, signal.SIGHUP)
    wait_until(lambda: "users re-read from" in gateway.log_text() and ": 2 users" in gateway.log_text(),
               timeout=EVENT_WITHIN, what="the re-read")
    path.write_text("{")
    os.kill(gateway.child.pid, signal.SIGHUP)
    wait_until(lambda: "users file not re-read, the previous users stay" in gateway.log_text(), timeout=EVENT_WITHIN,
               what="the refused re-read")
    assert gateway.alive()


def test_one_address_cannot_take_every_client_place(gateway_factory):
    gateway = gateway_factory("redis", "--max-clients-per-address", "2")
    held = [socket.create_connection(gateway.address, timeout=10) for _ in range(2)]
    try:
        for sock in held:
            sock.sendall(b"PING\r\n")
            assert sock.recv(100) == b"+PONG\r\n"
        refused = socket.create_connection(gateway.address, timeout=10)
        data = b""
        while chunk := refused.recv(4096):
            data += chunk
        refused.close()
        assert data == b"-ERR max number of clients reached\r\n"
        held.pop().close()

        def served():
            sock = socket.create_connection(gateway.address, timeout=10)
            sock.sendall(b"PING\r\n")
            if sock.recv(100) == b"+PONG\r\n":
                return sock
            sock.close()
            return None

        held.append(wait_until(served, timeout=EVENT_WITHIN, what="a freed place served"))
        assert "--max-clients-per-address" in gateway.log_text()
    finally:
        for sock in held:
            sock.close()
