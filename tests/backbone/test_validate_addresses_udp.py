"""Every fyrehose client against a real ``fyrehose backbone --validate-addresses`` over loopback, in both modes.

None of them takes an option for it: the readiness probe, ``Client`` (publisher and subscriber), the journal,
the cache, a gateway's link and the load test echo the cookie by themselves.  A base-protocol client that
cannot echo is served only from a ``--trust-net`` network; elsewhere it gets one 9-byte COOKIE and nothing else.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import time

import pytest
import redis

from fyrehose import Client
from fyrehose.backbone.cookies import SLOT_SECONDS
from fyrehose.drivers.backbone_io import wait_for_backbone
from fyrehose.protocol import codec
from fyrehose.runtime.process import ChildProcess

from gateway_support import GatewayProcess
from support import EVENT_WITHIN, FYREHOSE, LOOPBACK, CacheProcess, last_written, take, wait_until

VALIDATE = ["--validate-addresses"]


@pytest.fixture(params=[0, 2], ids=lambda workers: f"workers={workers}")
def validating(request, backbone_factory):
    return backbone_factory(workers=request.param, extra=VALIDATE)  # started through wait_for_backbone


def raw_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((LOOPBACK, 0))
    sock.settimeout(0.5)
    return sock


def received(sock: socket.socket, seconds: float) -> list[bytes]:
    """Everything the socket gets within ``seconds`` (bounded in count too)."""
    got: list[bytes] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and len(got) < 100_000:
        try:
            got.append(sock.recv(65536))
        except TimeoutError:
            pass
    return got


def test_clients_publish_subscribe_and_the_probe_needs_no_option(validating):
    wait_for_backbone(validating.addr, timeout=EVENT_WITHIN)
    with Client(validating.addr, subscribe=False) as publisher, Client(validating.addr) as subscriber:
        stream = subscriber.subscribe()
        sequences = publisher.publish_many([b"m%d" % i for i in range(200)])
        messages = take(stream, 200)
        assert [m.seq for m in messages] == sequences
        assert subscriber.connection.stats["cookies"] >= 1 and publisher.connection.stats["cookies"] >= 1
    metrics = validating.metrics()
    assert metrics.get("fyrehose_cookies_total", 0) >= 3  # the probe, the publisher, the subscriber
    assert metrics.get('fyrehose_dropped_total{reason="bad cookie"}', 0) == 0


def test_a_base_protocol_client_gets_one_cookie_and_no_stream(validating):
    with raw_socket() as sock, Client(validating.addr, subscribe=False) as publisher:
        keepalive = codec.encode(codec.Keepalive(flags=0, token=b"k" * 16))
        for _ in range(3):
            sock.sendto(keepalive, validating.addr)
        publisher.publish_many([b"x" * 100] * 100)
        got = received(sock, 1.0)
    assert len(got) == 1 and got[0][0] == codec.COOKIE and len(got[0]) == codec.COOKIE_FRAME_SIZE


def test_a_base_protocol_client_in_a_trusted_network_is_served(backbone_factory):
    backbone = backbone_factory(workers=0, extra=VALIDATE + ["--trust-net", "127.0.0.0/8"])
    with raw_socket() as sock, Client(backbone.addr, subscribe=False) as publisher:
        sock.sendto(codec.encode(codec.Keepalive(flags=0, token=b"k" * 16)), backbone.addr)
        assert sock.recv(65536) == bytes((codec.KEEPALIVE_ACK,)) + b"k" * 16
        sequence = publisher.publish(b"hello")
        assert sock.recv(65536) == codec.encode_deliver(sequence, b"hello")


def test_journal_and_cache_record_and_answer(validating, journals, tmp_path):
    journal = journals(validating, "journal")
    assert wait_until(journal.running, EVENT_WITHIN)
    with CacheProcess(validating, tmp_path), Client(validating.addr, subscribe=False) as publisher:
        last = publisher.publish_many([json.dumps({"n": i}).encode() for i in range(50)], subject="q.x")[-1]
        assert wait_until(lambda: last_written(journal.directory) >= last, EVENT_WITHIN)
        with Client(validating.addr) as reader:
            snapshot = reader.snapshot("q.x", timeout=10)
            assert json.loads(snapshot.data) == {"n": 49}


def test_a_gateway_s_link_serves_redis_clients(validating, tmp_path):
    gateway = GatewayProcess("redis", validating.address, tmp_path).start()
    try:
        client = redis.Redis(host=LOOPBACK, port=gateway.port, socket_timeout=10)
        pubsub = client.pubsub()
        pubsub.subscribe("news")
        assert pubsub.get_message(timeout=5)["type"] == "subscribe"
        deadline = time.monotonic() + 20
        message = None
        while message is None and time.monotonic() < deadline:  # until the subscription's interest is known
            client.publish("news", "hello")
            message = pubsub.get_message(ignore_subscribe_messages=True, timeout=1)
        assert message is not None and message["data"] == b"hello"
        client.close()
    finally:
        gateway.stop()


def test_the_load_test_runs_and_loses_nothing(backbone_factory, tmp_path):
    backbone = backbone_factory(workers=0, extra=VALIDATE)
    out = tmp_path / "out"
    with ChildProcess(FYREHOSE + ["loadtest", "--backbone", backbone.address, "--workers", "1", "--rate", "500",
                                  "--duration", "2", "--users", "2", "--drain", "1", "--out", str(out)],
                      tmp_path / "loadtest.log") as command:
        try:
            code = command.proc.wait(120)
        except subprocess.TimeoutExpired:
            code = -1  # hung: leaving the with block SIGTERMs it
        assert code == 0, command.output()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["complete"] and summary["messages"] > 0
    assert summary["message_failures"] == 0 and summary["loss_after_recovery"] == 0
    assert os.path.exists(out / "steps.jsonl")


def test_clients_keep_their_cookies_fresh_across_slots(backbone_factory):
    """Over three 10 s slots the ACKs renew every client's cookie (through the multi-process backbone's records):
    no client is ever refused, so no COOKIE goes out after the first ones."""
    backbone = backbone_factory(workers=2, extra=VALIDATE)
    with Client(backbone.addr, subscribe=False) as publisher, Client(backbone.addr) as subscriber:
        stream = subscriber.subscribe()
        first = backbone.metric("fyrehose_cookies_total")
        deadline = time.monotonic() + 2.5 * SLOT_SECONDS
        sequences = []
        while time.monotonic() < deadline:
            sequences.append(publisher.publish(b"tick"))
            time.sleep(0.5)
        assert [m.seq for m in take(stream, len(sequences))] == sequences
        assert subscriber.connection.stats["cookies"] >= 3  # the first, and a fresh one in an ACK each slot
    assert backbone.metric("fyrehose_cookies_total") == first
    assert backbone.metric('fyrehose_dropped_total{reason="bad cookie"}') == 0
