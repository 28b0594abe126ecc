"""Gateways against a hostile client: each attack that once froze, flooded or fooled a gateway, as a test.

One test per finding of the attack run (docs/security.md, "Gateways"): a
backtracking PSUBSCRIBE pattern, forged interest announcements and reads of
internal subjects, one client's flood starving the others, unbounded
commands, and limits that locked everyone out.  Each fails when its
protection is removed: the waits are bounded (a frozen gateway answers
nothing within them), never timed assertions.  The full-size versions are
marked slow.
"""
from __future__ import annotations

import socket
import threading
import time

import orjson
import pytest

from fyrehose.gateways.redis import protocol as resp
from fyrehose.runtime.process import ChildProcess

from gateway_support import GatewayProcess, RawNats, gateways, marlin_frame, module_backbone  # noqa: F401
from support import EVENT_WITHIN, LOOPBACK, free_port, wait_until

HOSTILE_PATTERN = b"*a*a*a*a*a*a*a*a*a*a*b"


def command(*args: bytes) -> bytes:
    return b"*%d\r\n" % len(args) + b"".join(resp.bulk(arg) for arg in args)


class RawRedis:
    """RESP typed by hand: replies read one at a time (simple, error, integer and flat arrays of bulks)."""

    def __init__(self, address, timeout: float = 10.0) -> None:
        self.sock = socket.create_connection(address, timeout=timeout)
        self.data = b""

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def line(self) -> bytes:
        while b"\r\n" not in self.data:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise EOFError(f"connection closed; unparsed: {self.data[:80]!r}")
            self.data += chunk
        line, self.data = self.data.split(b"\r\n", 1)
        return line

    def reply(self):
        line = self.line()
        if line[:1] == b"$":
            return None if line == b"$-1" else self.line()
        if line[:1] == b"*":
            return [self.reply() for _ in range(int(line[1:]))]
        if line[:1] == b":":
            return int(line[1:])
        return line

    def call(self, *args: bytes):
        self.send(command(*args))
        return self.reply()

    def closed(self) -> bytes:
        """Everything until the gateway hangs up."""
        while True:
            try:
                chunk = self.sock.recv(65536)
            except ConnectionResetError:
                return self.data
            if not chunk:
                return self.data
            self.data += chunk

    def close(self) -> None:
        self.sock.close()


@pytest.fixture(scope="module")
def redis_address(gateways):  # noqa: F811
    return gateways["redis"].address


# ---------------------------------------------------------------- 1. backtracking patterns


def test_a_backtracking_pattern_does_not_freeze_the_gateway(gateways):  # noqa: F811
    hostile = RawRedis(gateways["redis"].address)
    assert hostile.call(b"PSUBSCRIBE", HOSTILE_PATTERN) == [b"psubscribe", HOSTILE_PATTERN, 1]
    publisher = RawRedis(gateways["redis"].address)
    for _ in range(5):  # counted and routed: both once tried every pattern as a backtracking regex
        assert publisher.call(b"PUBLISH", b"a" * 1000, b"x") == 0
    assert publisher.call(b"PUBLISH", b"a" * 999 + b"b", b"y") == 1
    assert hostile.reply() == [b"pmessage", HOSTILE_PATTERN, b"a" * 999 + b"b", b"y"]
    bystander = RawRedis(gateways["redis"].address)  # a frozen gateway would answer nobody within the timeout
    assert bystander.call(b"PING") == b"+PONG"
    for client in (hostile, publisher, bystander):
        client.close()


def test_pattern_length_and_count_are_bounded(redis_address):
    from fyrehose.gateways.redis.connection import MAX_PATTERNS
    from fyrehose.subjects.redis_glob import MAX_PATTERN

    client = RawRedis(redis_address)
    client.send(command(b"PSUBSCRIBE", b"*" * (MAX_PATTERN + 1)))
    assert client.reply() == f"-ERR psubscribe name of {MAX_PATTERN + 1} bytes is too long (at most {MAX_PATTERN})".encode()
    client.send(command(b"PSUBSCRIBE", *[b"p%d*" % index for index in range(MAX_PATTERNS + 1)]))
    replies = [client.reply() for _ in range(MAX_PATTERNS + 1)]
    assert replies[-2] == [b"psubscribe", b"p%d*" % (MAX_PATTERNS - 1), MAX_PATTERNS]
    assert replies[-1] == f"-ERR at most {MAX_PATTERNS} pattern subscriptions per client".encode()
    client.send(command(b"SUBSCRIBE", b"c" * 1025))
    assert client.reply() == b"-ERR subscribe name of 1025 bytes is too long (at most 1024)"
    client.close()


# ---------------------------------------------------------------- 2. internal subjects


def test_nats_clients_cannot_publish_or_subscribe_on_internal_subjects(gateways):  # noqa: F811
    client = RawNats(gateways["nats"].address)
    forged = orjson.dumps({"owner": "forged", "interval": 3600, "subjects": {">": 1000000}})
    client.send(b'CONNECT {"verbose":false}\r\nPUB _INTEREST.ANNOUNCE %d\r\n%s\r\n' % (len(forged), forged))
    assert client.line() == b"-ERR 'Permissions Violation for Publish to \"_INTEREST.ANNOUNCE\"'"
    for subject in (b"_INTEREST.>", b"_SESSION.HB", b"_SESSION.*"):
        client.send(b"SUB %s 1\r\n" % subject)
        assert client.line() == b"-ERR 'Permissions Violation for Subscription to \"%s\"'" % subject
    client.send(b"PING\r\n")
    assert client.line() == b"PONG"  # refused, not disconnected, as nats-server does
    redis = RawRedis(gateways["redis"].address)
    assert redis.call(b"PUBLISH", b"nobody.listens.here", b"x") == 0  # the forged announcement counted nothing


def test_wildcard_subscribers_never_see_internal_traffic(gateways):  # noqa: F811
    watcher = RawNats(gateways["nats"].address)
    watcher.send(b'CONNECT {"verbose":false}\r\nSUB > 1\r\nPING\r\n')
    assert watcher.line() == b"PONG"
    redis = RawRedis(gateways["redis"].address)
    assert redis.call(b"PSUBSCRIBE", b"changes.*")[0] == b"psubscribe"  # makes the redis gateway announce at once
    publisher = RawRedis(gateways["redis"].address)
    time.sleep(0.5)  # let the announcement travel; a session heartbeat (every 2 s) may pass too
    deadline = time.monotonic() + 3
    seen = []
    while time.monotonic() < deadline:
        assert publisher.call(b"PUBLISH", b"visible.mark", b"m") >= 1
        line = watcher.line()
        while not line.startswith(b"MSG visible.mark"):
            seen.append(line)
            line = watcher.line()
        watcher.line()
    assert not any(line.startswith((b"MSG _INTEREST", b"MSG _SESSION")) for line in seen), seen


def test_redis_and_marlin_clients_cannot_use_internal_channels(gateways):  # noqa: F811
    redis = RawRedis(gateways["redis"].address)
    noperm = b"-NOPERM this user has no permissions to access one of the channels used as arguments"
    assert redis.call(b"PUBLISH", b"_INTEREST.ANNOUNCE", b"{}") == noperm
    assert redis.call(b"SUBSCRIBE", b"_SESSION.HB") == noperm
    assert redis.call(b"PSUBSCRIBE", b"_INTEREST.*") == noperm
    assert redis.call(b"PING") == b"+PONG"
    marlin = socket.create_connection(gateways["marlin"].address, timeout=10)
    marlin.sendall(marlin_frame(0, b"_SESSION.HELLO"))
    answer = marlin.recv(4096)
    assert answer[5:7] == b"\x02\x01" and b"internal" in answer  # RESPONSE ERROR
    marlin.close()


# ---------------------------------------------------------------- 3. fairness


def _flood(address, unit: bytes, stop: threading.Event) -> threading.Thread:
    def run() -> None:
        sock = socket.create_connection(address, timeout=5)
        data = unit * (65536 // len(unit))
        deadline = time.monotonic() + 20  # bounded whatever happens
        try:
            while not stop.is_set() and time.monotonic() < deadline:
                sock.sendall(data)
        except OSError:
            pass
        finally:
            sock.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("unit", [b"\r\n", b"PING\r\n", b"GET " + b"k" * 60000 + b"\r\n"], ids=["blank", "ping", "64k"])
def test_a_flooding_redis_client_does_not_starve_the_others(redis_address, unit):
    stop = threading.Event()
    flood = _flood(redis_address, unit, stop)
    try:
        time.sleep(0.3)  # the flood is under way
        other = RawRedis(redis_address, timeout=5)  # the reader that never yielded kept this waiting 12-15 s
        assert other.call(b"SUBSCRIBE", b"fair.share") == [b"subscribe", b"fair.share", 1]
        for _ in range(20):
            assert other.call(b"PING") == [b"pong", b""]
        other.close()
        publisher = RawRedis(redis_address, timeout=5)
        for _ in range(5):  # the backbone connection did not lapse: publishes are still confirmed
            assert isinstance(publisher.call(b"PUBLISH", b"fair.share", b"m"), int)
        publisher.close()
    finally:
        stop.set()
        flood.join(10)


def test_a_pong_flood_does_not_starve_other_nats_clients(gateways):  # noqa: F811
    stop = threading.Event()
    flood = _flood(gateways["nats"].address, b"PONG\r\n", stop)
    try:
        time.sleep(0.3)
        other = RawNats(gateways["nats"].address)
        other.send(b'CONNECT {"verbose":false}\r\nPING\r\n')
        assert other.line() == b"PONG"
    finally:
        stop.set()
        flood.join(10)


# ---------------------------------------------------------------- 4. bounded memory


def test_one_command_is_bounded_and_its_memory_returned(gateways):  # noqa: F811
    from fyrehose.gateways.redis.connection import MAX_COMMAND

    gateway = gateways["redis"]
    before = gateway.rss()
    bulk = b"$1048576\r\n" + b"x" * (1 << 20) + b"\r\n"
    for _ in range(4):
        client = RawRedis(gateway.address)
        client.send(b"*100000\r\n$9\r\nSUBSCRIBE\r\n")
        try:
            for _ in range(8):
                client.send(bulk)
        except OSError:
            pass  # the gateway hung up mid-way: what the test wants
        assert client.closed().endswith(f"-ERR Protocol error: command larger than {MAX_COMMAND} bytes\r\n".encode())
    assert gateway.alive()
    assert gateway.rss() - before < 40 << 20, "memory held after four oversized commands were refused"


# ---------------------------------------------------------------- 5. limits that refuse cleanly



def _refused(address) -> bytes:
    sock = socket.create_connection(address, timeout=10)
    data = b""
    while chunk := sock.recv(4096):
        data += chunk
    sock.close()
    return data


def _redis_server_refusal(tmp_path) -> bytes:
    port = free_port(socket.SOCK_STREAM)
    with ChildProcess(["redis-server", "--port", str(port), "--bind", LOOPBACK, "--save", "", "--appendonly", "no",
                       "--maxclients", "1", "--dir", str(tmp_path)], tmp_path / "redis-server.log"):
        first = wait_until(lambda: _connect((LOOPBACK, port)), timeout=EVENT_WITHIN, what="redis-server listening")
        first.sendall(b"PING\r\n")
        assert first.recv(100) == b"+PONG\r\n"
        refusal = _refused((LOOPBACK, port))
        first.close()
    return refusal


def _connect(address):
    try:
        return socket.create_connection(address, timeout=5)
    except OSError:
        return None


def test_redis_at_max_clients_refuses_as_redis_server_does(gateway_factory, tmp_path):
    gateway = gateway_factory("redis", "--max-clients", "2")
    idle = [socket.create_connection(gateway.address, timeout=5) for _ in range(2)]
    idle[0].sendall(b"PING\r\n")
    assert idle[0].recv(100) == b"+PONG\r\n"
    refusal = _refused(gateway.address)
    assert refusal == b"-ERR max number of clients reached\r\n" == _redis_server_refusal(tmp_path)
    idle[1].close()
    again = wait_until(lambda: _pinged(gateway.address), timeout=EVENT_WITHIN, what="a freed slot served")
    again.close()
    idle[0].close()


def _pinged(address):
    sock = socket.create_connection(address, timeout=5)
    sock.sendall(b"PING\r\n")
    if sock.recv(100) == b"+PONG\r\n":
        return sock
    sock.close()
    return None


def test_nats_at_max_clients_refuses_as_nats_server_does(gateway_factory):
    gateway = gateway_factory("nats", "--max-clients", "1")
    first = RawNats(gateway.address)
    refusal = _refused(gateway.address)
    assert refusal.startswith(b"INFO {") and refusal.endswith(b"\r\n-ERR 'maximum connections exceeded'\r\n")
    first.send(b'CONNECT {"verbose":false}\r\nPING\r\n')
    assert first.line() == b"PONG"


def test_marlin_at_max_clients_answers_an_error_response(gateway_factory):
    gateway = gateway_factory("marlin", "--max-clients", "1")
    first = socket.create_connection(gateway.address, timeout=5)
    refusal = _refused(gateway.address)
    assert refusal[4:7] == b"\x00\x02\x01" and refusal.endswith(b"max number of clients reached")
    first.close()


def test_nats_closes_clients_without_connect_and_stale_ones(gateway_factory):
    gateway = gateway_factory("nats", "--handshake-timeout", "0.5", "--ping-interval", "0.3", "--max-pings-out", "2")
    silent = RawNats(gateway.address)
    assert silent.until_closed() == b"-ERR 'Authentication Timeout'\r\n"
    stale = RawNats(gateway.address)
    stale.send(b'CONNECT {"verbose":false}\r\n')
    assert stale.until_closed() == b"PING\r\nPING\r\n-ERR 'Stale Connection'\r\n"  # what nats-server sends
    alive = RawNats(gateway.address)
    alive.send(b'CONNECT {"verbose":false}\r\n')
    for _ in range(4):  # answered PINGs keep a client for as long as it likes
        assert alive.line() == b"PING"
        alive.send(b"PONG\r\n")
    alive.send(b"PING\r\n")
    assert alive.line() in (b"PONG", b"PING")


def test_redis_idle_timeout_spares_subscribers(gateway_factory):
    gateway = gateway_factory("redis", "--idle-timeout", "0.5")
    idle = RawRedis(gateway.address)
    assert idle.call(b"PING") == b"+PONG"
    assert idle.closed() == b""  # closed without a word, as redis-server's timeout does
    subscriber = RawRedis(gateway.address)
    assert subscriber.call(b"SUBSCRIBE", b"kept") == [b"subscribe", b"kept", 1]
    time.sleep(1.0)
    assert subscriber.call(b"PING") == [b"pong", b""]


# ---------------------------------------------------------------- Lumberjack


def _lumberjack_acks(sock, seq: int) -> bool:
    """Send one JSON event in a window of one; True once it is acked."""
    from fyrehose.gateways.lumberjack.protocol import decode_acks, encode_json, encode_window

    sock.sendall(encode_window(1) + encode_json(seq, b'{"hardening": %d}' % seq))
    data = b""
    while len(data) < 6:
        chunk = sock.recv(64)
        if not chunk:
            return False
        data += chunk
    return (ord("2"), seq) in decode_acks(data[:6])


def _hung_up(sock) -> bool:
    try:
        return sock.recv(64) == b""
    except ConnectionResetError:
        return True


def test_lumberjack_refuses_beyond_max_connections_and_bounds_incomplete_frames(gateway_factory):
    gateway = gateway_factory("lumberjack", "--max-connections", "2", "--max-buffered-bytes", str(4 << 20),
                              "--stall-timeout", "0.5")
    honest = socket.create_connection(gateway.address, timeout=10)
    assert _lumberjack_acks(honest, 1)
    hoarder = socket.create_connection(gateway.address, timeout=10)
    hoarder.sendall(b"2C" + (3 << 20).to_bytes(4, "big") + b"\0" * 1000)  # fits the budget: held, then stalls
    refused = socket.create_connection(gateway.address, timeout=10)
    assert _hung_up(refused)  # the third of two: closed at once instead of hanging in the backlog
    assert _hung_up(hoarder)  # its frame stopped arriving for --stall-timeout
    greedy = socket.create_connection(gateway.address, timeout=10)
    greedy.sendall(b"2C" + (5 << 20).to_bytes(4, "big"))  # declared beyond the gateway's whole budget
    assert _hung_up(greedy)
    assert _lumberjack_acks(honest, 2)
    log = gateway.output()
    assert "refused, 2 connections open" in log and "no byte of an incomplete frame" in log
    assert "does not fit the gateway's input budget" in log
    for sock in (honest, hoarder, refused, greedy):
        sock.close()
