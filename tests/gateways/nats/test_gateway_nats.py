"""The NATS gateway driven by the unmodified nats-py client (and raw protocol lines where nats-py hides them)."""
from __future__ import annotations

import asyncio
import json
import shutil
import socket
import time

import nats
import pytest
from node_clients import run_node

from fyrehose.drivers.client import Client
from fyrehose.gateways.nats.connection import ANNOUNCED_MAX_PAYLOAD
from fyrehose.runtime.process import ChildProcess

from gateway_support import MarlinClient, RawNats, raw_subscriber
from support import EVENT_WITHIN, FYREHOSE, LOOPBACK, READY_WITHIN, free_port, nats_flushed, wait_until


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
        await nats_flushed(subscriber)
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
            await nats_flushed(client)
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
        live = asyncio.Event()

        async def answer(message):
            if not message.reply:  # the responder's own probe came back: its SUB is in place at the gateway
                live.set()
                return
            await message.respond(b"echo:" + message.data)

        await responder.subscribe("service.echo", cb=answer)
        # (not flush(): nats-py writes its PING ahead of a SUB still in its buffer, so the PONG may come first;
        # a PUB queued behind the SUB and echoed back proves the SUB arrived)
        await responder.publish("service.echo", b"probe")
        await asyncio.wait_for(live.wait(), 10)
        replies = [await requester.request("service.echo", b"%d" % index, timeout=5) for index in range(5)]
        assert [reply.data for reply in replies] == [b"echo:%d" % index for index in range(5)]
        with pytest.raises(nats.errors.NoRespondersError):  # at once, as from nats-server, not after the timeout
            await requester.request("service.nobody", b"?", timeout=20)
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


def test_headers_travel_end_to_end_to_nats_py(url):
    async def scenario():
        subscriber = await nats.connect(url)
        publisher = await nats.connect(url)
        subscription = await subscriber.subscribe("hdr.>")
        await nats_flushed(subscriber)
        await publisher.publish("hdr.one", b"\x00\xffbinary", headers={"X-Trace": "abc", "Content-Type": "a/b"})
        await publisher.publish("hdr.two", b"plain")
        first, second = await collect(subscription, 2)
        assert first.data == b"\x00\xffbinary" and first.headers == {"X-Trace": "abc", "Content-Type": "a/b"}
        assert second.data == b"plain" and second.headers is None

        async def answer(message):  # a responder that sets headers on its reply
            await subscriber.publish(message.reply, b"pong:" + message.data, headers={"Seen": message.headers["Ask"]})

        await subscriber.subscribe("hdr.service", cb=answer)
        await nats_flushed(subscriber)
        reply = await publisher.request("hdr.service", b"ping", timeout=5, headers={"Ask": "42"})
        assert reply.data == b"pong:ping" and reply.headers == {"Seen": "42"}
        await subscriber.close()
        await publisher.close()

    run(scenario())


def test_header_blocks_are_byte_exact_and_other_gateways_get_the_payload(gateways):
    block = b"NATS/1.0 503 No Responders\r\nA: 1\r\nA: 2\r\nb-Mixed:  spaced value \r\n\r\n"
    payload = b"\r\n\x00body"
    header_client = RawNats(gateways["nats"].address)
    header_client.send(b'CONNECT {"headers":true}\r\nSUB exact.h 5\r\nPING\r\n')
    assert header_client.line() == b"PONG"
    plain_client = RawNats(gateways["nats"].address)
    plain_client.send(b"CONNECT {}\r\nSUB exact.h 6\r\nPING\r\n")
    assert plain_client.line() == b"PONG"
    redis = raw_subscriber("redis", gateways["redis"].address, b"exact.h")
    redis.settimeout(5)
    expected_redis = b"*3\r\n$7\r\nmessage\r\n$7\r\nexact.h\r\n$%d\r\n%s\r\n" % (len(payload), payload)
    received = b""
    while not received.endswith(b"*3\r\n$9\r\nsubscribe\r\n$7\r\nexact.h\r\n:1\r\n"):
        received += redis.recv(65536)
    marlin = MarlinClient(gateways["marlin"].address)
    marlin.subscribe(b"exact.h")
    assert marlin.read() == ("response", True, b"exact.h")
    publisher = RawNats(gateways["nats"].address)
    publisher.send(b'CONNECT {"headers":true}\r\nHPUB exact.h reply.to %d %d\r\n%s%s\r\nPING\r\n'
                   % (len(block), len(block) + len(payload), block, payload))
    assert publisher.line() == b"PONG"
    wanted = b"HMSG exact.h 5 reply.to %d %d\r\n%s%s\r\n" % (len(block), len(block) + len(payload), block, payload)
    while len(header_client.data) < len(wanted):
        header_client.data += header_client.sock.recv(65536)
    assert header_client.data == wanted
    wanted_plain = b"MSG exact.h 6 reply.to %d\r\n%s\r\n" % (len(payload), payload)
    while len(plain_client.data) < len(wanted_plain):
        plain_client.data += plain_client.sock.recv(65536)
    assert plain_client.data == wanted_plain
    received = b""
    while len(received) < len(expected_redis):
        received += redis.recv(65536)
    assert received == expected_redis
    message = marlin.read()  # ("message", backbone sequence, channel, data): the payload alone, byte for byte
    assert message is not None and message[0] == "message" and message[2:] == (b"exact.h", payload), message
    assert marlin.read(timeout=0.3) is None  # and nothing else: no header block
    for sock in (header_client.sock, plain_client.sock, publisher.sock, redis, marlin.sock):
        sock.close()


def test_verbose_and_pedantic(url):
    async def scenario():
        client = await nats.connect(url, verbose=True, pedantic=True)
        subscription = await client.subscribe("verbose.x")
        await client.publish("verbose.x", b"ok")
        await client.flush()
        assert (await subscription.next_msg(timeout=5)).data == b"ok"
        await client.close()

    run(scenario())


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
    cache = ChildProcess(FYREHOSE + ["cache", "--backbone", module_backbone.address], tmp_path / "cache.log")
    try:
        cache.wait_ready(READY_WITHIN)

        async def scenario():
            client = await nats.connect(url)
            await client.publish("quotes.acme", b'{"bid": 10}')
            await client.flush()
            deadline = time.monotonic() + 10
            answer = None
            while time.monotonic() < deadline:  # until the cache's interest and the quote have reached the gateway
                try:
                    answer = await client.request("_SNAP.quotes.acme", b"", timeout=2)
                except nats.errors.NoRespondersError:
                    await asyncio.sleep(0.05)
                    continue
                if answer.data:
                    break
            assert answer is not None and answer.data == b'{"bid": 10}', answer
            assert answer.headers["Fyrehose-Type"] == "INITIAL"
            assert "Fyrehose-Sequence" not in answer.headers  # not asked for
            asked = await client.request("_SNAP.quotes.acme", b'{"sequence":true}', timeout=5)
            assert asked.data == b'{"bid": 10}'
            assert (asked.headers["Fyrehose-Type"], asked.headers["Fyrehose-Status"]) == ("INITIAL", "OK")
            missing = await client.request("_SNAP.quotes.none", b"", timeout=5)
            assert missing.data == b"" and missing.headers["Fyrehose-Status"] == "NOT_FOUND"
            await client.close()
            return int(asked.headers["Fyrehose-Sequence"])

        sequence = run(scenario())
        with Client(module_backbone.addr) as reader:  # the same record, read by the threaded client
            assert reader.snapshot("quotes.acme", timeout=10).record_seq == sequence
    finally:
        cache.stop()


def test_the_npm_nats_client_unmodified(gateways):
    watcher = RawNats(gateways["nats"].address)  # sees the bytes nats.js's HPUB carried, as they arrive
    watcher.send(b'CONNECT {"headers":true}\r\nSUB node.x.data 1\r\nPING\r\n')
    assert watcher.line() == b"PONG"
    assert run_node("nats_client.js", gateways["nats"].port).strip() == "ok"
    block = b"NATS/1.0\r\nMulti: one\r\nMulti: two\r\nTrace: abc\r\n\r\n"
    wanted = b"HMSG node.x.data 1 %d %d\r\n%s%s\r\n" % (len(block), len(block) + 256, block, bytes(range(256)))
    while len(watcher.data) < len(wanted):
        watcher.data += watcher.sock.recv(65536)
    assert watcher.data == wanted
    watcher.sock.close()


# ---------------------------------------------------------------- max_payload, as nats-server enforces it


def _answers(port: int, operations: bytes, until: bytes = b"PONG\r\n") -> tuple[dict, bytes]:
    """Connect with a raw socket, send ``operations`` after the server's INFO: (the INFO, every byte that follows
    until ``until`` or the server closes or resets the connection)."""
    with socket.create_connection((LOOPBACK, port), timeout=5) as sock:
        data = b""
        while b"\r\n" not in data:
            chunk = sock.recv(65536)
            assert chunk, "closed before INFO"
            data += chunk
        info, data = data.split(b"\r\n", 1)
        sock.sendall(operations)
        try:
            for _ in range(10_000):
                chunk = sock.recv(65536)
                if not chunk:
                    break
                data += chunk
                if data.endswith(until):
                    break
        except ConnectionResetError:
            pass  # nats-server resets the connection when the refused payload is still unread
    assert info.startswith(b"INFO {")
    return json.loads(info[5:]), data


def _serves(port: int, server: ChildProcess) -> bool:
    assert server.alive(), server.output()
    try:
        return _answers(port, b"PING\r\n")[1] == b"PONG\r\n"
    except OSError:
        return False


@pytest.fixture
def nats_server(tmp_path):
    """The real nats-server, configured with the gateway's announced max_payload; its port."""
    binary = shutil.which("nats-server", path="/usr/sbin:/usr/bin:/sbin:/usr/local/bin")
    assert binary, "nats-server is missing: tools/bootstrap --test installs tools/test-packages.txt"
    port = free_port(socket.SOCK_STREAM)
    config = tmp_path / "nats-server.conf"
    config.write_text(f"listen: {LOOPBACK}:{port}\nmax_payload: {ANNOUNCED_MAX_PAYLOAD}\n")
    with ChildProcess([binary, "-c", str(config)], tmp_path / "nats-server.log") as server:
        wait_until(lambda: _serves(port, server), EVENT_WITHIN, "nats-server")
        yield port


CONNECT = b'CONNECT {"verbose":false,"pedantic":false}\r\n'


def test_a_payload_over_max_payload_is_refused_byte_for_byte_as_nats_server_does(gateways, nats_server):
    """A client that does not check max_payload itself (nats.js and nats-py do, before sending) sends it anyway."""
    limit = ANNOUNCED_MAX_PAYLOAD
    over = CONNECT + b"PUB big.x %d\r\n" % (limit + 1) + b"x" * (limit + 1) + b"\r\nPING\r\n"
    at_limit = CONNECT + b"PUB big.x %d\r\n" % limit + b"x" * limit + b"\r\nPING\r\n"
    header_only = CONNECT + b"PUB big.x %d\r\n" % (limit + 1)
    refused = b"-ERR 'Maximum Payload Violation'\r\n"
    for port in (nats_server, gateways["nats"].port):
        info, answer = _answers(port, over)
        assert info["max_payload"] == limit
        assert answer == refused, port  # then the connection ends: no PONG
        assert _answers(port, header_only)[1] == refused, port  # refused on the PUB line, before any payload
        assert _answers(port, at_limit)[1] == b"PONG\r\n", port  # the limit itself is accepted
    assert gateways["nats"].alive()
