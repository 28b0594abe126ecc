"""Interest across the deployment: NATS no-responders and Redis PUBLISH counts see every gateway and client."""
from __future__ import annotations

import asyncio
import threading
import time

import nats
import pytest
import redis

from fyrehose import Client

from gateway_support import MarlinClient, RawNats
from support import LOOPBACK, wait_until


def run(coroutine):
    return asyncio.run(asyncio.wait_for(coroutine, 60))


def redis_count(port: int, channel: str) -> int:
    client = redis.Redis(host=LOOPBACK, port=port)
    try:
        return client.publish(channel, b"probe")
    finally:
        client.close()


def pattern_messages_until(pubsub, data: bytes, timeout: float = 10.0) -> list[tuple[bytes, bytes, bytes]]:
    """The (pattern, channel, data) of the pattern messages ``pubsub`` gets, up to the one carrying ``data``."""
    received: list[tuple[bytes, bytes, bytes]] = []
    deadline = time.monotonic() + timeout
    while not received or received[-1][2] != data:
        assert time.monotonic() < deadline, f"no pattern message {data!r} within {timeout} s: {received}"
        message = pubsub.get_message(timeout=0.2)
        if message is not None and message["type"] == "pmessage":
            received.append((message["pattern"], message["channel"], message["data"]))
    return received


def test_redis_publish_counts_receivers_on_every_gateway_and_client(gateways, module_backbone):
    port = gateways["redis"].port
    assert redis_count(port, "count.me") == 0
    local = redis.Redis(host=LOOPBACK, port=port).pubsub()
    local.subscribe("count.me")
    local.psubscribe("count.*")
    assert wait_until(lambda: redis_count(port, "count.me") == 2)

    async def with_nats_subscriber():
        nc = await nats.connect(f"nats://{LOOPBACK}:{gateways['nats'].port}")
        await nc.subscribe("count.>")
        await nc.flush()
        assert await asyncio.to_thread(wait_until, lambda: redis_count(port, "count.me") == 3)
        marlin = MarlinClient(gateways["marlin"].address)
        marlin.subscribe(b"count.me")
        assert marlin.read()[:2] == ("response", True)
        assert await asyncio.to_thread(wait_until, lambda: redis_count(port, "count.me") == 4)
        with Client(module_backbone.addr) as client:
            client.subscribe("count.me")
            assert await asyncio.to_thread(wait_until, lambda: redis_count(port, "count.me") == 5)
        # the client left (interval 0), the NATS client closes: both stop counting
        assert await asyncio.to_thread(wait_until, lambda: redis_count(port, "count.me") == 4)
        await nc.close()
        assert await asyncio.to_thread(wait_until, lambda: redis_count(port, "count.me") == 3)
        marlin.close()

    run(with_nats_subscriber())
    assert wait_until(lambda: redis_count(port, "count.me") == 2)
    local.close()


def test_no_responders_unless_someone_anywhere_subscribes(gateways, module_backbone):
    url = f"nats://{LOOPBACK}:{gateways['nats'].port}"

    async def scenario():
        requester = await nats.connect(url)
        with pytest.raises(nats.errors.NoRespondersError):  # the 503 status, not the timeout (TimeoutError)
            await requester.request("remote.service", b"?", timeout=20)

        stop = threading.Event()
        with Client(module_backbone.addr) as client:  # a responder behind no gateway at all
            requests = client.subscribe("remote.service")

            def serve():
                while not stop.is_set():
                    message = requests.get(timeout=0.1)
                    if message is not None and message.reply:
                        client.publish(b"answer:" + message.data, subject=message.reply)

            responder = threading.Thread(target=serve, daemon=True)
            responder.start()
            reply = None
            deadline = time.monotonic() + 15
            while reply is None and time.monotonic() < deadline:  # until the announcement reached the gateway
                try:
                    reply = await requester.request("remote.service", b"q", timeout=5)
                except nats.errors.NoRespondersError:
                    await asyncio.sleep(0.05)
            assert reply is not None and reply.data == b"answer:q"
            stop.set()
            responder.join(5)
        redis_side = redis.Redis(host=LOOPBACK, port=gateways["redis"].port).pubsub()
        redis_side.psubscribe("redis.svc.*")  # a Redis pattern subscriber counts as interest too
        accepted = None
        deadline = time.monotonic() + 15
        for attempt in range(1000):
            if accepted is not None or time.monotonic() > deadline:
                break
            try:
                await requester.request("redis.svc.x", b"q%d" % attempt, timeout=0.3)
            except nats.errors.NoRespondersError:
                await asyncio.sleep(0.05)
            except nats.errors.TimeoutError:  # no 503: accepted, and a Redis client cannot answer
                accepted = b"q%d" % attempt
        assert accepted is not None, "the Redis pattern subscriber's interest never reached the NATS gateway"
        received = await asyncio.to_thread(pattern_messages_until, redis_side, accepted)
        assert received[-1] == (b"redis.svc.*", b"redis.svc.x", accepted)  # it did reach the Redis subscriber
        redis_side.close()
        await requester.close()

    run(scenario())


def test_no_responders_only_for_clients_that_asked(gateways):
    raw = RawNats(gateways["nats"].address)
    raw.send(b'CONNECT {"headers":true,"no_responders":true}\r\nSUB _INBOX.me.* 9\r\n'
             b"PUB nobody.home _INBOX.me.1 2\r\nhi\r\nPING\r\n")
    status = b"NATS/1.0 503\r\n\r\n"
    wanted = b"HMSG _INBOX.me.1 9 16 16\r\n" + status + b"\r\nPONG\r\n"
    while len(raw.data) < len(wanted):
        raw.data += raw.sock.recv(65536)
    assert raw.data == wanted
    plain = RawNats(gateways["nats"].address)
    plain.send(b'CONNECT {"headers":true}\r\nSUB _INBOX.me.* 9\r\nPUB nobody.home _INBOX.me.1 2\r\nhi\r\nPING\r\n')
    assert plain.line() == b"PONG" and plain.data == b""
    raw.sock.close()
    plain.sock.close()
