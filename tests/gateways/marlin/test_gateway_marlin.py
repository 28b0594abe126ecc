"""The Marlin gateway driven by a Marlin client written from docs/gateways.md (tests/gateway_support.py)."""
from __future__ import annotations

import struct

import redis

from gateway_support import M_RESPONSE, MarlinClient, marlin_frame
from support import LOOPBACK


def test_subscribe_publish_unsubscribe(gateways):
    address = gateways["marlin"].address
    subscriber, publisher = MarlinClient(address), MarlinClient(address)
    subscriber.subscribe(b"weather.oslo")
    publisher.subscribe(b"weather.oslo")
    assert subscriber.read() == ("response", True, b"weather.oslo")
    assert publisher.read() == ("response", True, b"weather.oslo")
    for index in range(100):
        publisher.publish(b"weather.oslo", b"%d degrees" % index, message_id=index)
    got = [subscriber.read() for _ in range(100)]
    assert [frame[0] for frame in got] == ["message"] * 100
    assert [frame[3] for frame in got] == [b"%d degrees" % index for index in range(100)]
    assert {frame[2] for frame in got} == {b"weather.oslo"}
    ids = [frame[1] for frame in got]
    assert ids == sorted(ids) and len(set(ids)) == 100  # backbone sequence numbers
    assert publisher.read(timeout=0.5) is None  # docs/gateways.md: subscribers get what *other* clients publish
    subscriber.publish(b"weather.oslo", b"reply")
    assert publisher.read()[3] == b"reply"
    subscriber.unsubscribe(b"weather.oslo")
    assert subscriber.read() == ("response", True, b"weather.oslo")
    subscriber.unsubscribe(b"weather.oslo")
    status = subscriber.read()
    assert status[:2] == ("response", False) and b"not subscribed" in status[2]
    publisher.publish(b"weather.oslo", b"unheard")
    assert subscriber.read(timeout=0.5) is None
    subscriber.close()
    publisher.close()


def test_channels_are_shared_with_redis_clients(gateways):
    """A channel with a space travels as an encoded subject that both gateways map the same way."""
    marlin = MarlinClient(gateways["marlin"].address)
    marlin.subscribe(b"market data")
    assert marlin.read()[:2] == ("response", True)
    client = redis.Redis(host=LOOPBACK, port=gateways["redis"].port, socket_timeout=10)
    pubsub = client.pubsub()
    pubsub.subscribe(b"\x00binary\xff")
    assert pubsub.get_message(timeout=5)["type"] == "subscribe"
    client.publish("market data", b"from redis")
    frame = marlin.read()
    assert frame[0] == "message" and frame[2:] == (b"market data", b"from redis")
    marlin.publish(b"\x00binary\xff", b"from marlin")
    message = pubsub.get_message(timeout=5)
    assert (message["channel"], message["data"]) == (b"\x00binary\xff", b"from marlin")
    pubsub.close()
    client.close()
    marlin.close()


def test_bad_frames_are_answered_and_the_connection_goes_on(gateways):
    client = MarlinClient(gateways["marlin"].address)
    lying = marlin_frame(3, struct.pack(">QQH", 50, 1, 2) + b"ch" + b"short")
    client.sock.sendall(marlin_frame(0, b"x", version=1) + marlin_frame(9, b"") + lying
                        + marlin_frame(M_RESPONSE, b"\x00ok") + marlin_frame(0, b""))
    answers = [client.read() for _ in range(5)]
    assert [answer[:2] for answer in answers] == [("response", False)] * 5
    assert b"unsupported version 1" in answers[0][2]
    assert b"unknown message type" in answers[1][2]
    assert b"do not add up" in answers[2][2]
    assert b"RESPONSE" in answers[3][2]
    assert b"empty channel" in answers[4][2]
    client.publish(b"too.big", b"x" * 70000, message_id=77)
    too_big = client.read()
    assert too_big[:2] == ("response", False) and b"message 77" in too_big[2]
    client.subscribe(b"still.here")
    assert client.read() == ("response", True, b"still.here")
    client.close()


def test_a_bad_frame_length_ends_only_that_connection(gateways):
    client = MarlinClient(gateways["marlin"].address)
    client.sock.sendall(b"\xff\xff\xff\xff\x00\x00")
    answer = client.read()
    assert answer[:2] == ("response", False) and b"frame length" in answer[2]
    assert client.read(timeout=5) is None  # closed
    client.close()
    again = MarlinClient(gateways["marlin"].address)
    again.subscribe(b"after.garbage")
    assert again.read() == ("response", True, b"after.garbage")
    again.close()
    assert gateways["marlin"].alive()
