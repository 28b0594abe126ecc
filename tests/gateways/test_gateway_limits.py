"""The gateways' limits as pure rules and in-process servers: deadlines, announcement bounds, budgets, freed memory."""
from __future__ import annotations

import gc
import struct
import time
import weakref
from collections import Counter

import gevent
import gevent.socket
import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fyrehose.gateways.budget import InputBudget
from fyrehose.gateways.channels import is_internal, pattern_is_internal, subject_to_channel
from fyrehose.gateways.drivers.tcp import GatewayServer
from fyrehose.gateways.liveness import HANDSHAKE_TIMEOUT, IDLE, PING, STALE, IdleTimeout, NatsLiveness
from fyrehose.gateways.lumberjack.protocol import FrameDecoder
from fyrehose.subjects.envelope import Envelope
from fyrehose.subjects.interest import (
    INTEREST_SUBJECT,
    MAX_COUNT,
    MAX_ENTRIES,
    MAX_INTERVAL,
    MISSED_ANNOUNCEMENTS,
    InterestTable,
)

# ---------------------------------------------------------------- deadlines


def test_nats_liveness_follows_nats_server():
    live = NatsLiveness(accepted=100.0, handshake_timeout=2.0, ping_interval=10.0, max_pings_out=2)
    assert live.next_deadline(100.0) == 102.0 and live.handle_timers(101.9, 100.0) is None
    assert live.handle_timers(102.0, 100.0) == HANDSHAKE_TIMEOUT
    live.connect()
    assert live.next_deadline(101.0) == 111.0
    assert live.handle_timers(111.0, 101.0) == PING and live.handle_timers(121.0, 101.0) == PING
    assert live.handle_timers(131.0, 101.0) == STALE  # two PINGs unanswered
    live.pong()  # answered after all: the count starts again
    assert live.handle_timers(131.0, 101.0) == PING and live.handle_timers(140.9, 101.0) is None and live.handle_timers(141.0, 101.0) == PING
    assert live.handle_timers(151.0, 101.0) == STALE
    assert live.next_deadline(150.0) == 160.0  # a client that talks is not PINGed


def test_idle_timeout_as_redis_server_timeout():
    assert IdleTimeout(0).next_deadline(5.0, exempt=False) is None  # 0: never
    idle = IdleTimeout(30)
    assert idle.next_deadline(5.0, exempt=False) == 35.0 and idle.handle_timers(34.9, 5.0, False) is None
    assert idle.handle_timers(35.0, 5.0, False) == IDLE
    assert idle.next_deadline(5.0, exempt=True) is None and idle.handle_timers(99.0, 5.0, True) is None


# ---------------------------------------------------------------- internal subjects


def test_internal_subjects_and_patterns():
    assert is_internal("_INTEREST.ANNOUNCE") and is_internal("_SESSION.HB")
    assert not is_internal("_INBOX.x") and not is_internal("_SNAP.quotes") and not is_internal("orders")
    assert pattern_is_internal("_INTEREST.>") and pattern_is_internal("_SESSION.*") and pattern_is_internal("_SESSION")
    assert not pattern_is_internal(">") and not pattern_is_internal("*.ANNOUNCE")  # delivery skips those


# ---------------------------------------------------------------- announcement bounds


def announce(owner: str, **fields) -> Envelope:
    return Envelope(INTEREST_SUBJECT, orjson.dumps({"owner": owner, **fields}))


def test_announced_counts_are_clamped_and_intervals_capped():
    table = InterestTable(subject_to_channel)
    assert table.receive(announce("forged", interval=3600, subjects={">": 10**9}, globs={"*": 10**9}), 0.0)
    assert table.count("anything") == 2 * MAX_COUNT
    assert table.expire(MAX_INTERVAL * MISSED_ANNOUNCEMENTS - 0.1) == []
    assert table.expire(MAX_INTERVAL * MISSED_ANNOUNCEMENTS) == ["forged"]  # not after 3 hours


def test_oversized_announcements_are_rejected():
    from fyrehose.subjects.redis_glob import MAX_PATTERN

    table = InterestTable(subject_to_channel)
    many = {f"s.{index}": 1 for index in range(MAX_ENTRIES + 1)}
    assert not table.receive(announce("big", subjects=many), 0.0)
    assert not table.receive(announce("long", globs={"*" * (MAX_PATTERN + 1): 1}), 0.0)
    assert not table.receive(announce("x" * 1000, subjects={"a": 1}), 0.0)
    assert table.rejected == 3 and len(table) == 0


def test_hostile_announced_globs_are_counted_in_linear_time():
    table = InterestTable(subject_to_channel)
    globs = {"*a" * 10 + "*b": 1, "*a*a*a*a*b": 1}
    assert table.receive(announce("g", globs=globs), 0.0)
    assert table.count("a" * 1000) == 0 and table.count("a" * 999 + "b") == 2


@given(st.dictionaries(st.text(max_size=12), st.integers(1, 10**12), max_size=20))
def test_whatever_is_announced_counts_within_bounds(globs):
    table = InterestTable(subject_to_channel)
    table.receive(announce("o", globs=globs, subjects={"a.*": 10**12}), 0.0)
    assert table.count("a.b") <= MAX_COUNT * (len(globs) + 1)


# ---------------------------------------------------------------- Lumberjack frames by declared size


def test_a_compressed_frame_commits_its_declared_size_before_it_arrives():
    decoder = FrameDecoder(max_compressed_bytes=32 << 20)
    decoder.feed(b"2C" + struct.pack(">I", 30 << 20) + b"x" * 100)
    assert decoder.buffered == 106 and decoder.committed == 6 + (30 << 20)
    budget = InputBudget(64 << 20)
    assert budget.resize(0, decoder.committed) and budget.resize(0, decoder.committed)
    assert not budget.resize(0, decoder.committed)  # the third does not fit: refused before buffering
    assert budget.resize(decoder.committed, 0) and budget.used == 6 + (30 << 20)


# ---------------------------------------------------------------- in-process servers


class Blaster:
    """A connection that answers every input with ``size`` bytes (a subscriber's backlog, made to order)."""

    def __init__(self, client, size: int) -> None:
        self.client = client
        self.size = size

    def receive(self, data: bytes) -> None:
        self.client.send(b"x" * self.size)

    def farewell(self, reason: str) -> bytes:
        return b""

    def closed(self) -> None:
        pass

    def next_deadline(self):
        return None

    def handle_timers(self, now: float) -> None:
        pass

    def held(self) -> int:
        return 0


def serve(make_connection, **limits) -> GatewayServer:
    options = {"max_pending": 64 << 20, "max_clients": 16, "stats": Counter()} | limits
    server = GatewayServer(("127.0.0.1", 0), make_connection, **options)
    server.start()
    return server


def small_buffer_client(address):
    sock = gevent.socket.socket()
    sock.setsockopt(gevent.socket.SOL_SOCKET, gevent.socket.SO_RCVBUF, 4096)
    sock.connect(address)
    return sock


def settle(condition, what: str, rounds: int = 500) -> None:
    for _ in range(rounds):
        if condition():
            return
        gevent.sleep(0.01)
    raise AssertionError(f"{what} did not happen within {rounds * 0.01:g} s")


def test_all_clients_share_one_output_budget_and_the_furthest_behind_goes():
    server = serve(lambda client: Blaster(client, 3 << 20), max_output=8 << 20)
    try:
        slow = [small_buffer_client(server.address) for _ in range(3)]
        for sock in slow:  # none of them reads: three backlogs of about 3 MiB against an 8 MiB budget
            sock.sendall(b"go")
            gevent.sleep(0.05)
        settle(lambda: server.stats["slow consumers"] >= 1, "a slow consumer disconnected")
        assert server.stats["slow consumers"] == 1
        assert server.budget.used <= server.budget.limit
        for sock in slow:
            sock.close()
        settle(lambda: server.budget.used == 0 and not server.budget.clients, "the budget released")
    finally:
        server.stop()



class NoBackbone:
    """A router with nobody behind it: enough for connections to subscribe, and to fail publishing."""

    position = 0

    def __init__(self) -> None:
        from fyrehose.subjects.interest import LocalInterest

        self.interest = LocalInterest("gw.test")
        self.ready: list = []  # drivers whose outbox the stream made ready (the stream brings nothing here)

    def subscribers_elsewhere(self, subject: str) -> int:
        return 0

    def publish_with(self, payloads, done):
        raise RuntimeError("no backbone here")


def redis_connections():
    from fyrehose.gateways.drivers.driver import ConnectionDriver
    from fyrehose.gateways.redis.connection import RedisConnection, RedisRoutes

    routes, router = RedisRoutes(), NoBackbone()
    hello = (b"SUBSCRIBE a b\r\nPSUBSCRIBE c* d?\r\nPUBLISH x y\r\n*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$100\r\n", 16)
    return (lambda client: ConnectionDriver(client, RedisConnection(routes, router, Counter()),  # type: ignore[arg-type]
                                            router, Counter()),  # type: ignore[arg-type]
            hello, lambda: not routes.channels and not routes.patterns)


def nats_connections():
    from fyrehose.gateways.drivers.driver import ConnectionDriver
    from fyrehose.gateways.liveness import NatsLiveness
    from fyrehose.gateways.nats.connection import NatsConnection, NatsRoutes, server_info

    routes, router = NatsRoutes(Counter()), NoBackbone()
    hello = (b'CONNECT {"echo":false,"verbose":false}\r\nSUB a.> 1\r\nSUB b q 2\r\nPING\r\nPUB a.b 2\r\nhi\r\nPUB x 9\r\n', 3)
    return (lambda client: ConnectionDriver(client, NatsConnection(  # type: ignore[arg-type]
                routes, router, Counter(), info=server_info("S", "127.0.0.1", 4222), peer=client.peer,  # type: ignore[arg-type]
                liveness=NatsLiveness(time.monotonic())), router, Counter()),  # type: ignore[arg-type]
            hello, lambda: not routes.index)


@pytest.mark.parametrize("connections", [redis_connections, nats_connections], ids=["redis", "nats"])
def test_a_closed_connection_is_freed_without_the_cycle_collector(connections):
    make_connection, (hello, lines), unsubscribed = connections()
    alive: weakref.WeakSet = weakref.WeakSet()

    def make(client):
        connection = make_connection(client)
        alive.add(connection)
        alive.add(client)
        return connection

    server = serve(make)
    gc.collect()
    gc.disable()
    try:
        for _ in range(3):
            sock = gevent.socket.create_connection(server.address, timeout=60)
            sock.sendall(hello)
            received = b""
            while received.count(b"\r\n") < lines:
                received += sock.recv(65536)
            sock.close()
        settle(lambda: not alive, "connections and clients freed")
        assert unsubscribed()
    finally:
        gc.enable()
        server.stop()


@pytest.mark.parametrize("clients", [2])
def test_a_client_beyond_the_limit_is_told_and_closed(clients):
    server = serve(lambda client: Blaster(client, 1), max_clients=clients, refusal=b"-ERR full\r\n")
    try:
        held = [gevent.socket.create_connection(server.address) for _ in range(clients)]
        for sock in held:
            sock.sendall(b"?")
            assert sock.recv(10) == b"x"
        extra = gevent.socket.create_connection(server.address)
        assert extra.recv(100) == b"-ERR full\r\n" and extra.recv(100) == b""
        assert server.stats["refused connections"] == 1
        for sock in held + [extra]:
            sock.close()
    finally:
        server.stop()


def test_the_table_holds_a_bounded_number_of_distinct_globs(monkeypatch):
    import fyrehose.subjects.interest as interest

    monkeypatch.setattr(interest, "MAX_GLOBS", 4)
    table = InterestTable(subject_to_channel)
    assert table.receive(announce("a", globs={"a*": 1, "b*": 1, "c*": 1}), 0.0)
    assert table.receive(announce("b", globs={"a*": 1, "d*": 1}), 0.0)  # a* is shared: four distinct
    assert not table.receive(announce("c", globs={"e*": 1}), 0.0)  # a fifth is refused
    assert table.receive(announce("a", globs={"e*": 1}), 0.0)  # replacing its own frees b* and c*
    assert table.count("e.x") == 1 and table.count("a.x") == 1


def test_the_gateway_holds_a_bounded_number_of_distinct_patterns(monkeypatch):
    import fyrehose.gateways.redis.connection as redis

    monkeypatch.setattr(redis, "MAX_GATEWAY_PATTERNS", 3)
    routes, router = redis.RedisRoutes(), NoBackbone()
    one = redis.RedisConnection(routes, router, Counter())  # type: ignore[arg-type]
    two = redis.RedisConnection(routes, router, Counter())  # type: ignore[arg-type]
    one.receive(b"PSUBSCRIBE a* b* c*\r\n", 0.0)
    two.receive(b"PSUBSCRIBE a* d*\r\n", 0.0)
    sent = two.outbox.take()
    assert sent.endswith(b"-ERR this gateway holds its most distinct patterns (3); "
                         b"subscribe to one already held\r\n")
    assert sent.startswith(b"*3\r\n$10\r\npsubscribe\r\n$2\r\na*\r\n:1\r\n")  # a held one is shared
    one.closed()
    two.receive(b"PSUBSCRIBE d*\r\n", 0.0)
    assert two.outbox.take() == b"*3\r\n$10\r\npsubscribe\r\n$2\r\nd*\r\n:2\r\n"


class Hoarder(Blaster):
    """A connection that keeps every byte it is sent unfinished (an incomplete command without end)."""

    def __init__(self, client, size: int) -> None:
        super().__init__(client, size)
        self.kept = 0

    def receive(self, data: bytes) -> None:
        self.kept += len(data)

    def farewell(self, reason: str) -> bytes:
        return b"-ERR " + reason.encode() + b"\r\n"

    def held(self) -> int:
        return self.kept


def test_all_clients_unfinished_input_shares_one_budget():
    server = serve(lambda client: Hoarder(client, 0), max_input=256 << 10)
    try:
        first = gevent.socket.create_connection(server.address)
        first.sendall(b"x" * (200 << 10))
        settle(lambda: server.input_budget.used >= 200 << 10, "the first client's input held")
        second = gevent.socket.create_connection(server.address)
        second.sendall(b"y" * (100 << 10))
        answer = b""
        while chunk := second.recv(4096):
            answer += chunk
        assert answer == f"-ERR the gateway's input budget of {256 << 10} bytes is spent\r\n".encode()
        assert server.stats["input budget refusals"] == 1
        first.close()
        second.close()
        settle(lambda: server.input_budget.used == 0, "the budget released")
    finally:
        server.stop()


class Pauser(Blaster):
    """A connection that pauses its client after every input it takes (a request waiting for its CONFIRM)."""

    def __init__(self, client, size: int) -> None:
        super().__init__(client, size)
        self.taken: list[bytes] = []

    def receive(self, data: bytes) -> None:
        self.taken.append(data)
        self.client.pause()


def test_a_paused_client_is_read_again_on_resume_and_its_watcher_stops_only_if_input_comes_meanwhile():
    connections: list[Pauser] = []
    server = serve(lambda client: connections.append(Pauser(client, 0)) or connections[-1])
    try:
        sock = gevent.socket.create_connection(server.address)
        sock.sendall(b"a")
        settle(lambda: connections and connections[0].taken == [b"a"], "the first input taken")
        pauser = connections[0]
        client = pauser.client
        assert client.paused and client._read_watcher.active  # the pause alone costs the loop nothing
        client.resume()
        sock.sendall(b"b")
        settle(lambda: pauser.taken == [b"a", b"b"], "the input after the resume taken")
        sock.sendall(b"c")  # arrives while paused: it stops the watcher and stays in the kernel
        settle(lambda: not client._read_watcher.active, "the watcher stopped by input during the pause")
        assert pauser.taken == [b"a", b"b"]
        client.resume()
        settle(lambda: pauser.taken == [b"a", b"b", b"c"], "the input of the pause taken on resume")
        sock.close()
    finally:
        server.stop()
