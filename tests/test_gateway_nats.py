"""The NATS gateway driven by the unmodified nats-py client (and raw protocol lines where nats-py hides them)."""
from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import time

import nats
import pytest

from fyrehose.process import wait_until

from support import FYREHOSE, LOOPBACK


@pytest.fixture
def url(gateways) -> str:
    return f"nats://{LOOPBACK}:{gateways['nats'].port}"


def run(coroutine):
    return asyncio.run(asyncio.wait_for(coroutine, 30))


async def collect(subscription, count: int, timeout: float = 10.0) -> list:
    return [await subscription.next_msg(timeout=timeout) for _ in range(count)]


def test_publish_subscribe_with_wildcards_in_order(url):
    async def scenario():
        subscriber = await nats.connect(url)
        publisher = await nats.connect(url)
        one = await subscriber.subscribe("orders.*.new")
        rest = await subscriber.subscribe("orders.>")
        exact = await subscriber.subscribe("orders.eu.new")
        await subscriber.flush()
        for index in range(50):
            await publisher.publish("orders.eu.new", b"%d" % index)
        await publisher.publish("orders.eu.new.extra", b"deep")
        await publisher.publish("orders.us", b"us", reply="replies.here")
        await publisher.flush()
        got_one = [m.data for m in await collect(one, 50)]
        got_exact = [m.data for m in await collect(exact, 50)]
        got_rest = await collect(rest, 52)
        assert got_one == got_exact == [b"%d" % index for index in range(50)]
        assert [m.data for m in got_rest[50:]] == [b"deep", b"us"]
        assert got_rest[51].reply == "replies.here" and got_rest[51].subject == "orders.us"
        with pytest.raises(nats.errors.TimeoutError):
            await one.next_msg(timeout=0.3)  # orders.eu.new.extra is not orders.*.new
        await subscriber.close()
        await publisher.close()

    run(scenario())


def test_queue_group_gets_each_message_once(url):
    async def scenario():
        members = [await nats.connect(url) for _ in range(3)]
        observer = await nats.connect(url)
        subscriptions = [await member.subscribe("jobs.run", queue="workers") for member in members]
        plain = await observer.subscribe("jobs.run")
        for client in members + [observer]:
            await client.flush()
        publisher = await nats.connect(url)
        for index in range(60):
            await publisher.publish("jobs.run", b"%d" % index)
        await publisher.flush()
        assert len(await collect(plain, 60)) == 60
        received = []
        for subscription in subscriptions:
            while True:
                try:
                    received.append((await subscription.next_msg(timeout=0.5)).data)
                except nats.errors.TimeoutError:
                    break
        assert sorted(received, key=int) == [b"%d" % index for index in range(60)]
        for client in members + [observer, publisher]:
            await client.close()

    run(scenario())


def test_request_reply_through_inboxes(url):
    async def scenario():
        responder = await nats.connect(url)
        requester = await nats.connect(url)

        async def answer(message):
            await message.respond(b"echo:" + message.data)

        await responder.subscribe("service.echo", cb=answer)
        await responder.flush()
        replies = [await requester.request("service.echo", b"%d" % index, timeout=5) for index in range(5)]
        assert [reply.data for reply in replies] == [b"echo:%d" % index for index in range(5)]
        with pytest.raises(nats.errors.TimeoutError):
            await requester.request("service.nobody", b"?", timeout=0.5)
        await responder.close()
        await requester.close()

    run(scenario())


def test_no_echo_and_headers(url):
    async def scenario():
        quiet = await nats.connect(url, no_echo=True)
        other = await nats.connect(url)
        mine = await quiet.subscribe("talk.room")
        theirs = await other.subscribe("talk.room")
        await quiet.flush()
        await other.flush()
        await quiet.publish("talk.room", b"from quiet")
        # (nats-py's flush() writes its PING ahead of buffered PUBs, so it does not order two clients:
        # wait for the message itself)
        assert (await theirs.next_msg(timeout=5)).data == b"from quiet"
        await other.publish("talk.room", b"from other", headers={"X-Trace": "1"})
        assert (await theirs.next_msg(timeout=5)).data == b"from other"
        assert (await mine.next_msg(timeout=5)).data == b"from other"  # not its own message
        with pytest.raises(nats.errors.TimeoutError):
            await mine.next_msg(timeout=0.3)
        await quiet.close()
        await other.close()

    run(scenario())


def test_verbose_and_pedantic(url):
    async def scenario():
        client = await nats.connect(url, verbose=True, pedantic=True)
        subscription = await client.subscribe("verbose.x")
        await client.publish("verbose.x", b"ok")
        await client.flush()
        assert (await subscription.next_msg(timeout=5)).data == b"ok"
        await client.close()

    run(scenario())


class RawNats:
    """The client protocol typed by hand, for what nats-py never sends."""

    def __init__(self, address) -> None:
        self.sock = socket.create_connection(address, timeout=5)
        self.data = b""
        self.info = self.line()
        assert self.info.startswith(b"INFO {")

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def line(self) -> bytes:
        while b"\r\n" not in self.data:
            chunk = self.sock.recv(65536)
            if not chunk:
                return b""
            self.data += chunk
        line, self.data = self.data.split(b"\r\n", 1)
        return line

    def until_closed(self) -> bytes:
        while True:
            try:
                chunk = self.sock.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            self.data += chunk
        return self.data


def test_raw_protocol_modes_and_limits(gateways):
    raw = RawNats(gateways["nats"].address)
    raw.send(b'CONNECT {"verbose":true,"pedantic":true}\r\n')
    assert raw.line() == b"+OK"
    raw.send(b"SUB limited.x 7\r\nUNSUB 7 2\r\n")
    assert [raw.line(), raw.line()] == [b"+OK", b"+OK"]
    raw.send(b"PUB limited.x 1\r\na\r\nPUB limited.x 1\r\nb\r\nPUB limited.x 1\r\nc\r\nPING\r\n")
    lines = [raw.line() for _ in range(8)]  # deliveries interleave with the replies
    assert sorted(lines) == sorted([b"+OK"] * 3 + [b"PONG"] + [b"MSG limited.x 7 1", b"a", b"MSG limited.x 7 1", b"b"])
    assert lines.index(b"a") < lines.index(b"b")
    time.sleep(0.3)
    raw.send(b"PING\r\n")
    assert raw.line() == b"PONG"  # the third message went to nobody: UNSUB 7 2 ended the subscription
    raw.send(b"SUB bad..subject 8\r\nPUB wild.* 0\r\n\r\nPING\r\n")
    assert [raw.line(), raw.line(), raw.line()] == [b"-ERR 'Invalid Subject'", b"-ERR 'Invalid Publish Subject'",
                                                    b"PONG"]
    raw.send(b"PUB big.x 70000\r\n")
    assert raw.until_closed().endswith(b"-ERR 'Maximum Payload Violation'\r\n")


@pytest.mark.parametrize("garbage", [b"FOO bar\r\n", b"PUB x\r\n", b"SUB " + b"y" * 5000, b"PUB x 2\r\nabc\r\n",
                                     b"CONNECT {nope\r\n"])
def test_malformed_input_gets_an_error_and_the_gateway_stays_up(gateways, garbage):
    raw = RawNats(gateways["nats"].address)
    raw.send(garbage)
    assert raw.until_closed().startswith(b"-ERR '")
    again = RawNats(gateways["nats"].address)
    again.send(b"PING\r\n")
    assert again.line() == b"PONG"
    assert gateways["nats"].alive()


def test_snapshot_requests_are_answered_by_the_cache(url, module_backbone, tmp_path):
    with open(tmp_path / "cache.log", "wb") as log:
        cache = subprocess.Popen(FYREHOSE + ["cache", "--backbone", module_backbone.address], stdout=log,
                                 stderr=subprocess.STDOUT)
    try:
        assert wait_until(lambda: b"session" in (tmp_path / "cache.log").read_bytes(), timeout=15)

        async def scenario():
            client = await nats.connect(url)
            await client.publish("quotes.acme", b'{"bid": 10}')
            await client.flush()
            deadline = time.monotonic() + 10
            while True:
                answer = await client.request("_SNAP.quotes.acme", b"", timeout=2)
                if answer.data or time.monotonic() > deadline:
                    break
            assert answer.data == b'{"bid": 10}'
            assert answer.headers["Fyrehose-Type"] == "INITIAL"
            missing = await client.request("_SNAP.quotes.none", b"", timeout=5)
            assert missing.data == b"" and missing.headers["Fyrehose-Status"] == "NOT_FOUND"
            await client.close()

        run(scenario())
    finally:
        os.kill(cache.pid, signal.SIGKILL)
        cache.wait(10)
