"""The Redis gateway driven by unmodified Redis clients: redis-py (RESP2 and RESP3) and redis-cli."""
from __future__ import annotations

import os
import selectors
import signal
import socket
import subprocess
import time

import pytest
import redis
from node_clients import run_node

from support import EVENT_WITHIN, LOOPBACK, CacheProcess, wait_until


def messages(pubsub, count: int, timeout: float = 10.0) -> list[dict]:
    got = []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        message = pubsub.get_message(timeout=0.5)
        if message is not None:
            got.append(message)
    return got


@pytest.fixture
def redis_port(gateways):
    return gateways["redis"].port


@pytest.mark.parametrize("protocol", [2, 3])
def test_subscribe_psubscribe_publish(redis_port, protocol):
    client = redis.Redis(host=LOOPBACK, port=redis_port, protocol=protocol, socket_timeout=10)
    pubsub = client.pubsub()
    pubsub.subscribe(f"news.{protocol}.sports")
    pubsub.psubscribe(f"news.{protocol}.*", "n?ws*")
    assert [m["type"] for m in messages(pubsub, 3)] == ["subscribe", "psubscribe", "psubscribe"]
    assert client.publish(f"news.{protocol}.sports", b"goal") == 3  # the receivers this gateway knows
    got = messages(pubsub, 3)
    assert {(m["type"], m["pattern"], m["channel"], m["data"]) for m in got} == {
        ("message", None, f"news.{protocol}.sports".encode(), b"goal"),
        ("pmessage", f"news.{protocol}.*".encode(), f"news.{protocol}.sports".encode(), b"goal"),
        ("pmessage", b"n?ws*", f"news.{protocol}.sports".encode(), b"goal"),
    }
    assert client.publish(f"weather.{protocol}", b"rain") == 0
    pubsub.punsubscribe("n?ws*")
    assert messages(pubsub, 1)[0]["type"] == "punsubscribe"
    assert client.publish(f"news.{protocol}.other", b"x") == 1
    assert messages(pubsub, 1)[0]["data"] == b"x"
    pubsub.unsubscribe()
    pubsub.punsubscribe()
    assert {m["type"] for m in messages(pubsub, 2)} == {"unsubscribe", "punsubscribe"}
    assert client.publish(f"news.{protocol}.sports", b"late") == 0
    pubsub.close()
    client.close()


@pytest.mark.parametrize("protocol", [2, 3])
def test_connection_commands(redis_port, protocol):
    client = redis.Redis(host=LOOPBACK, port=redis_port, protocol=protocol, client_name="tester", socket_timeout=10)
    assert client.ping()
    assert client.client_getname() in ("tester", b"tester")
    assert client.client_setname("other") and client.client_getname() in ("other", b"other")
    assert isinstance(client.client_id(), int)
    assert client.execute_command("SELECT", 0) in (b"OK", "OK", True)
    with pytest.raises(redis.ResponseError, match="DB index is out of range"):
        client.execute_command("SELECT", 1)
    with pytest.raises(redis.ResponseError, match="unknown command 'set'"):
        client.set("key", "value")
    with pytest.raises(redis.ResponseError, match="wrong number of arguments"):
        client.execute_command("PUBLISH", "only-a-channel")
    hello = client.execute_command("HELLO", protocol)
    fields = hello if isinstance(hello, dict) else dict(zip(hello[::2], hello[1::2]))
    assert fields[b"proto"] == protocol and fields[b"server"] == b"fyrehose"
    with pytest.raises(redis.ResponseError, match="NOPROTO"):
        client.execute_command("HELLO", 4)
    client.close()


def test_resp2_subscribed_context_and_ping(redis_port):
    sock = socket.create_connection((LOOPBACK, redis_port), timeout=5)
    sock.sendall(b"SUBSCRIBE ctx.a\r\nPING\r\nPING hi\r\nGET x\r\nQUIT\r\n")
    data = b""
    while True:
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    sock.close()
    assert data == (b"*3\r\n$9\r\nsubscribe\r\n$5\r\nctx.a\r\n:1\r\n"
                    b"*2\r\n$4\r\npong\r\n$0\r\n\r\n"
                    b"*2\r\n$4\r\npong\r\n$2\r\nhi\r\n"
                    b"-ERR Can't execute 'get': only (P)SUBSCRIBE / (P)UNSUBSCRIBE / PING / QUIT are allowed "
                    b"in this context\r\n"
                    b"+OK\r\n")


def test_pipelined_publishes_arrive_in_order(redis_port):
    client = redis.Redis(host=LOOPBACK, port=redis_port, socket_timeout=10)
    pubsub = client.pubsub()
    pubsub.subscribe("pipe.line")
    assert messages(pubsub, 1)[0]["type"] == "subscribe"
    pipe = client.pipeline(transaction=False)
    for index in range(500):
        pipe.publish("pipe.line", b"%d" % index)
    assert pipe.execute() == [1] * 500
    assert [m["data"] for m in messages(pubsub, 500)] == [b"%d" % index for index in range(500)]
    pubsub.close()
    client.close()


def test_channels_that_are_not_subjects_still_work(redis_port):
    client = redis.Redis(host=LOOPBACK, port=redis_port, socket_timeout=10)
    pubsub = client.pubsub()
    odd = ["with space", "a..b", "star*", "\u00e9t\u00e9", "_CHAN.x"]
    pubsub.subscribe(*odd)
    pubsub.psubscribe("with *")
    assert len(messages(pubsub, len(odd) + 1)) == len(odd) + 1
    for channel in odd:
        client.publish(channel, channel.encode())
    got = messages(pubsub, len(odd) + 1)
    assert [m["channel"].decode() for m in got if m["type"] == "message"] == odd
    assert [m["data"] for m in got if m["type"] == "pmessage"] == [b"with space"]
    with pytest.raises(redis.ResponseError, match="empty channel"):
        client.publish("", b"x")
    with pytest.raises(redis.ResponseError, match="exceeds the maximum"):
        client.publish("big", b"x" * 70000)
    assert client.ping()  # the connection is still fine
    pubsub.close()
    client.close()


def test_redis_cli(redis_port):
    """The OS package's redis-cli, as a user would run it."""
    cli = ["redis-cli", "-h", LOOPBACK, "-p", str(redis_port)]
    subscriber = subprocess.Popen(cli + ["subscribe", "cli.chan"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    output = OutputLines(subscriber)
    try:
        assert output.next(3) == [b"subscribe", b"cli.chan", b"1"]
        for word in ("one", "two"):
            published = subprocess.run(cli + ["publish", "cli.chan", word], capture_output=True, timeout=10)
            assert published.stdout.strip() == b"1"
        assert output.next(6) == [b"message", b"cli.chan", b"one", b"message", b"cli.chan", b"two"]
    finally:
        os.kill(subscriber.pid, signal.SIGKILL)
        subscriber.communicate(timeout=10)
    assert subprocess.run(cli + ["ping"], capture_output=True, timeout=10).stdout.strip() == b"PONG"
    error = subprocess.run(cli + ["lpush", "k", "v"], capture_output=True, timeout=10)
    assert b"ERR unknown command 'lpush'" in error.stdout + error.stderr


class OutputLines:
    """A process's output line by line, read unbuffered so that select sees every byte."""

    def __init__(self, process: subprocess.Popen) -> None:
        self.fd = process.stdout.fileno()
        self.pending = bytearray()

    def next(self, count: int, timeout: float = 10.0) -> list[bytes]:
        deadline = time.monotonic() + timeout
        with selectors.DefaultSelector() as selector:
            selector.register(self.fd, selectors.EVENT_READ)
            while self.pending.count(b"\n") < count and selector.select(max(0.0, deadline - time.monotonic())):
                chunk = os.read(self.fd, 4096)
                if not chunk:
                    break
                self.pending += chunk
        lines = bytes(self.pending).split(b"\n")[:count]
        del self.pending[:sum(len(line) + 1 for line in lines)]
        return [line.strip() for line in lines]


def test_malformed_input_gets_an_error_and_the_gateway_stays_up(gateways):
    address = gateways["redis"].address
    for garbage in (b"*1\r\n$abc\r\n", b"*2\r\n$4\r\nPING\r\n:5\r\n", b"*1\r\n$999999999\r\n", b'PING "open\r\n'):
        sock = socket.create_connection(address, timeout=5)
        sock.sendall(garbage)
        reply = b""
        while True:
            chunk = sock.recv(4096)
            if not chunk:
                break
            reply += chunk
        sock.close()
        assert reply.startswith(b"-ERR Protocol error"), (garbage, reply)
    client = redis.Redis(host=LOOPBACK, port=gateways["redis"].port, socket_timeout=5)
    assert client.ping()
    client.close()
    assert gateways["redis"].alive()


def test_get_is_answered_by_the_cache(gateways, module_backbone, tmp_path):
    client = redis.Redis(host=LOOPBACK, port=gateways["redis"].port, socket_timeout=10)
    with pytest.raises(redis.ResponseError, match="no cache answered"):
        client.get("prices.none")
    with CacheProcess(module_backbone, tmp_path):
        assert wait_until(lambda: _get_or_error(client, "prices.none") is None, timeout=EVENT_WITHIN)
        client.publish("prices.acme", b"101.5")
        assert wait_until(lambda: _get_or_error(client, "prices.acme") == b"101.5", timeout=EVENT_WITHIN)
        client.publish("prices.acme", b"102")
        assert wait_until(lambda: _get_or_error(client, "prices.acme") == b"102", timeout=EVENT_WITHIN)
    client.close()


def _get_or_error(client, key):
    try:
        return client.get(key)
    except redis.ResponseError as exc:
        return exc


def test_the_npm_ioredis_client_unmodified(redis_port):
    assert run_node("ioredis_client.js", redis_port).strip() == "ok"


def test_redis_benchmark_publish_through_the_gateway(redis_port):
    """redis-benchmark (Debian redis-tools) PUBLISHes through the gateway; a subscriber gets every message."""
    subscriber = redis.Redis(host=LOOPBACK, port=redis_port).pubsub()
    subscriber.subscribe("bench.channel")
    assert subscriber.get_message(timeout=5)["type"] == "subscribe"
    count = 2000
    result = subprocess.run(["redis-benchmark", "-h", LOOPBACK, "-p", str(redis_port), "-n", str(count), "-c", "4",
                             "-P", "10", "--csv", "PUBLISH", "bench.channel", "payload"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert '"PUBLISH bench.channel payload"' in result.stdout
    received = 0
    deadline = time.monotonic() + 30
    while received < count and time.monotonic() < deadline:
        message = subscriber.get_message(timeout=1)
        if message is not None and message["type"] == "message":
            assert message["data"] == b"payload"
            received += 1
    assert received == count
    subscriber.close()
