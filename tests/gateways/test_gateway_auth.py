"""Gateways with --auth-db: their TCP clients receive only verified messages, and what they publish is signed.

Real processes throughout: a backbone, a redis, a nats and a marlin gateway
sharing one users database, authenticated UDP clients, and an attacker that
PUSHes replayed, tampered, forged and unsigned envelopes straight to the
backbone.
"""
from __future__ import annotations

import re
import socket
import time

from fyrehose import Client
from fyrehose.runtime.credentials import save_auth_database
from fyrehose.subjects.auth import Credentials
from fyrehose.subjects.envelope import Envelope, encode

from auth_support import SERVICE, Attacker, genuine_bytes, users
from gateway_support import KINDS, GatewayProcess, raw_subscriber
from support import EVENT_WITHIN, run_cli, wait_until


def read_until(sock: socket.socket, marker: bytes, timeout: float = 15.0) -> bytes:
    """Everything ``sock`` received up to and including ``marker`` (bounded in time)."""
    received = b""
    deadline = time.monotonic() + timeout
    while marker not in received:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise AssertionError(f"{marker!r} not received; got {received[-300:]!r}")
        sock.settimeout(remaining)
        chunk = sock.recv(65536)
        if not chunk:
            raise AssertionError(f"connection closed before {marker!r}; got {received[-300:]!r}")
        received += chunk
    return received


def stop_counts(gateway: GatewayProcess) -> dict[str, int]:
    """The counters of the line a gateway logs when it stops: ``stopped; name count, ...``."""
    line = gateway.log_text().rsplit("stopped; ", 1)[1].splitlines()[0]
    return {name: int(count) for name, count in re.findall(r"([a-z ]+?) (\d+)(?:, |$)", line)}


def test_gateway_clients_get_only_verified_messages_and_gateway_publishes_are_signed(module_backbone, tmp_path):
    db = users("paul", "sam", "gateway")
    save_auth_database(db, tmp_path / "users.json")
    auth_args = ["--auth-db", str(tmp_path / "users.json"), "--service", SERVICE, "--session-interval", "0.5"]
    gateways = {kind: GatewayProcess(kind, module_backbone.address, tmp_path, list(auth_args)) for kind in KINDS}
    attacker = Attacker(module_backbone)
    sockets: dict[str, socket.socket] = {}
    try:
        for gateway in gateways.values():
            gateway.start()
        for kind, gateway in gateways.items():
            sockets[kind] = raw_subscriber(kind, gateway.address, b"q.x")
        with Client(module_backbone.address, auth=Credentials(db, "paul", SERVICE), session_interval=0.5) as paul, \
                Client(module_backbone.address, auth=Credentials(db, "sam", SERVICE), session_interval=0.5) as sam, \
                Client(module_backbone.address) as spy:
            # every gateway answered both HELLOs: the trust exchange is done
            wait_until(lambda: len(paul.auth.trusted_sessions()) >= 4 and len(sam.auth.trusted_sessions()) >= 4,
                       EVENT_WITHIN, "every gateway answering both HELLOs")
            listen = spy.subscribe()
            paul.publish(b"genuine 1", subject="q.x")
            genuine = genuine_bytes(listen, b"genuine 1")
            attacker.push(genuine)                                                  # replayed
            attacker.push(genuine[:-1] + b"!")                                      # tampered data
            attacker.push(attacker.forge(paul.session.name, Envelope("q.x", b"forged")))
            attacker.push(encode(Envelope("q.x", b"unsigned")))
            forged = b'{"owner": "forged", "interval": 60, "subjects": {">": 50000}}'
            attacker.push(encode(Envelope("_INTEREST.ANNOUNCE", forged)))          # an unsigned announcement
            paul.publish(b"genuine 2", subject="q.x")
            for kind, sock in sockets.items():
                seen = read_until(sock, b"genuine 2")
                assert seen.count(b"genuine 1") == 1, (kind, seen)
                for attack in (b"genuine !", b"forged", b"unsigned"):
                    assert attack not in seen, (kind, attack, seen)
            with socket.create_connection(gateways["redis"].address, timeout=5) as counter:
                counter.sendall(b"*3\r\n$7\r\nPUBLISH\r\n$11\r\nnobody.here\r\n$1\r\nx\r\n")
                assert int(counter.recv(64)[1:].strip()) < 50000  # the unsigned announcement counted nothing

            # the other way: what a gateway client publishes reaches an authenticating subscriber, signed
            stream = sam.subscribe("q.y")
            with socket.create_connection(gateways["redis"].address, timeout=5) as publisher:
                publisher.sendall(b"*3\r\n$7\r\nPUBLISH\r\n$3\r\nq.y\r\n$10\r\nfrom redis\r\n")
                assert publisher.recv(64).startswith(b":")
            event = stream.get(timeout=10)
            assert event is not None and event.data == b"from redis"
            assert event.envelope.session.startswith("gateway.") and event.envelope.digest
    finally:
        for sock in sockets.values():
            sock.close()
        attacker.close()
        for gateway in gateways.values():
            if gateway.child is not None:
                gateway.stop()
    for kind, gateway in gateways.items():
        counts = stop_counts(gateway)
        assert counts.get("auth replayed", 0) >= 1, (kind, counts)
        assert counts.get("auth bad digest", 0) >= 2, (kind, counts)
        assert counts.get("auth unsigned", 0) >= 1, (kind, counts)


def test_gateway_auth_options_are_checked_in_one_line(tmp_path):
    result = run_cli("gateway", "redis", "--listen", "127.0.0.1:0", "--auth-db", str(tmp_path / "users.json"))
    error = result.stderr.decode().strip()
    assert result.returncode != 0 and error.endswith("--auth-db and --service go together") and "\n" not in error
    save_auth_database(users("paul"), tmp_path / "users.json")
    result = run_cli("gateway", "nats", "--listen", "127.0.0.1:0", "--auth-db", str(tmp_path / "users.json"),
                     "--service", SERVICE)
    error = result.stderr.decode().strip()
    assert result.returncode != 0 and "\n" not in error
    assert "'gateway'" in error and "not in the auth database" in error
