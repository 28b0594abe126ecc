"""The HTTP gateway driven by real clients: curl (HTTP routes, ``curl -N`` for SSE), Python websockets and npm ws.

Every client checks bytes exactly: RESP replies and pushes over WebSocket are
the bytes the Redis gateway sends on TCP, one value per binary message.
"""
from __future__ import annotations

import asyncio
import base64
import json
import socket
import subprocess

import psutil
import pytest
import websockets
from node_clients import run_node

from gateway_support import GatewayProcess, SseReader
from support import EVENT_WITHIN, LOOPBACK, CacheProcess, wait_until


@pytest.fixture(scope="module")
def http_gateway(module_backbone, tmp_path_factory):
    process = GatewayProcess("http", module_backbone.address, tmp_path_factory.mktemp("http-gateway")).start()
    yield process
    process.kill()


def base_url(gateway: GatewayProcess) -> str:
    return f"http://{LOOPBACK}:{gateway.port}"


def curl(*args: str, timeout: float = 20.0) -> subprocess.CompletedProcess:
    return subprocess.run(["curl", "-s", "-S", "--max-time", str(int(timeout)), *args],
                          capture_output=True, timeout=timeout + 5)


def publish(gateway: GatewayProcess, subject: str, data: bytes) -> dict:
    completed = subprocess.run(["curl", "-s", "-S", "--max-time", "20", "-X", "POST", "--data-binary", "@-",
                                "-w", "\n%{http_code}", f"{base_url(gateway)}/v1/publish/{subject}"],
                               input=data, capture_output=True, timeout=25)
    body, _, status = completed.stdout.rpartition(b"\n")
    assert status == b"200", (status, body, completed.stderr)
    return json.loads(body)


def status_of(*args: str) -> tuple[int, bytes]:
    completed = curl("-o", "-", "-w", "\n%{http_code}", *args)
    body, _, status = completed.stdout.rpartition(b"\n")
    return int(status), body


# ---------------------------------------------------------------- plain HTTP with curl

def test_publish_answers_the_sequence_and_receivers(http_gateway):
    first = publish(http_gateway, "http.pub.a", b"one")
    second = publish(http_gateway, "http.pub.a", b"two")
    assert second["seq"] > first["seq"] > 0
    assert first["receivers"] == 0


@pytest.mark.parametrize("subject, status", [("bad..subject", 400), ("wild.*", 400), ("has%20space", 400),
                                             ("%FF", 400)])
def test_publish_refuses_bad_subjects(http_gateway, subject, status):
    code, body = status_of("-X", "POST", "--data-binary", "x", f"{base_url(http_gateway)}/v1/publish/{subject}")
    assert code == status, body


def test_publish_over_the_payload_limit_is_413(http_gateway):
    big = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-X", "POST", "--data-binary", "@-",
                          f"{base_url(http_gateway)}/v1/publish/http.big"],
                         input=b"x" * 70_000, capture_output=True, timeout=25)
    assert big.stdout == b"413"  # more than one backbone message carries
    huge = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-X", "POST", "--data-binary", "@-",
                           f"{base_url(http_gateway)}/v1/publish/http.big"],
                          input=b"x" * (2 << 20), capture_output=True, timeout=25)
    assert huge.stdout == b"413"  # over --max-message: refused before the body is read


def test_methods_and_unknown_routes(http_gateway):
    assert status_of(f"{base_url(http_gateway)}/v1/publish/a.b")[0] == 405
    assert status_of(f"{base_url(http_gateway)}/nowhere")[0] == 404
    assert status_of(f"{base_url(http_gateway)}/resp")[0] == 426


def last_headers(url: str, *args: str) -> tuple[int, dict[str, str]]:
    """The status and header fields (names in lower case) of a GET, as curl received them."""
    lines = curl("-D", "-", "-o", "/dev/null", *args, url).stdout.decode().strip().splitlines()
    return int(lines[0].split()[1]), {name.lower(): value for name, value in (line.split(": ", 1) for line in lines[1:])}


def test_last_value_from_the_cache(http_gateway, module_backbone, tmp_path):
    url = f"{base_url(http_gateway)}/v1/last/http.prices.acme"
    assert status_of(url)[0] == 504  # no cache runs
    with CacheProcess(module_backbone, tmp_path):
        assert wait_until(lambda: status_of(url)[0] == 404, timeout=EVENT_WITHIN)
        first = publish(http_gateway, "http.prices.acme", b'{"bid":101.5}')["seq"]
        assert wait_until(lambda: status_of(url) == (200, b'{"bid":101.5}'), timeout=EVENT_WITHIN)
        publish(http_gateway, "http.prices.other", b"1")  # the stream moves on; the record's sequence does not
        code, fields = last_headers(url)
        assert code == 200 and fields["fyrehose-status"] == "ok"
        assert fields["fyrehose-sequence"] == str(first) and fields["etag"] == f'"{first}"'
        for tag in (f'"{first}"', f'W/"{first}"', f'"1", "{first}"', "*"):
            code, fields = last_headers(url, "-H", f"If-None-Match: {tag}")
            assert code == 304 and fields["etag"] == f'"{first}"', tag
        assert status_of("-H", f'If-None-Match: "{first + 1}"', url) == (200, b'{"bid":101.5}')
        second = publish(http_gateway, "http.prices.acme", b'{"ask":102}')["seq"]  # merged into the record
        merged = b'{"bid":101.5,"ask":102}'
        assert wait_until(lambda: status_of("-H", f'If-None-Match: "{first}"', url) == (200, merged), timeout=EVENT_WITHIN)
        code, fields = last_headers(url, "-H", f'If-None-Match: "{first}"')
        assert (code, fields["fyrehose-sequence"], fields["etag"]) == (200, str(second), f'"{second}"')
        assert status_of("-H", f'If-None-Match: "{second}"', url) == (304, b"")
        publish(http_gateway, "http.prices.acme", b"102")  # not an object: replaces the record
        assert wait_until(lambda: status_of(url) == (200, b"102"), timeout=EVENT_WITHIN)
        async def get_over_websocket() -> list[bytes]:
            async with websockets.connect(f"ws://{LOOPBACK}:{http_gateway.port}/resp") as ws:
                await ws.send(b"GET http.prices.acme\r\nGET http.prices.none\r\n")
                return [await recv(ws), await recv(ws)]

        assert asyncio.run(get_over_websocket()) == [b"$3\r\n102\r\n", b"$-1\r\n"]  # as the Redis gateway answers


def test_metrics_and_health(http_gateway):
    code, body = status_of(f"{base_url(http_gateway)}/healthz")
    assert (code, body) == (200, b"ok\n")
    publish(http_gateway, "http.metrics", b"x")
    code, body = status_of(f"{base_url(http_gateway)}/metrics")
    assert code == 200
    samples = dict(line.rsplit(" ", 1) for line in body.decode().splitlines() if not line.startswith("#"))
    assert samples['fyrehose_gateway_up{kind="http"}'] == "1"
    assert int(samples['fyrehose_gateway_position{kind="http"}']) > 0
    assert int(samples['fyrehose_gateway_published_total{kind="http"}']) > 0


def test_health_is_503_once_the_backbone_is_gone(tmp_path):
    from support import BackboneProcess

    backbone = BackboneProcess(tmp_path / "state").start()
    gateway = GatewayProcess("http", backbone.address, tmp_path).start()
    try:
        assert status_of(f"{base_url(gateway)}/healthz")[0] == 200
        backbone.kill()
        assert wait_until(lambda: status_of(f"{base_url(gateway)}/healthz")[0] == 503, timeout=EVENT_WITHIN), \
            "healthz did not turn 503 after the backbone died"
    finally:
        gateway.kill()
        backbone.kill()


# ---------------------------------------------------------------- Server-Sent Events with curl -N

def test_sse_events_are_byte_exact(http_gateway):
    reader = SseReader(f"{base_url(http_gateway)}/v1/stream/http.sse.%3E")
    try:
        reader.read_until(b": stream http.sse.>\n\n")
        text = publish(http_gateway, "http.sse.text", "caf\u00e9\nline two".encode())["seq"]
        binary = publish(http_gateway, "http.sse.bin", bytes(range(256)))["seq"]
        crlf = publish(http_gateway, "http.sse.crlf", b"a\r\nb")["seq"]
        empty = publish(http_gateway, "http.sse.empty", b"")["seq"]
        publish(http_gateway, "http.other", b"not for this stream")
        last = publish(http_gateway, "http.sse.end", b"end")["seq"]
        data = reader.read_until(b"id: %d\n" % last)
    finally:
        reader.close()
    expected = (b"id: %d\nevent: http.sse.text\ndata: caf\xc3\xa9\ndata: line two\n\n" % text
                + b"id: %d\nevent: http.sse.bin base64\ndata: %s\n\n" % (binary, base64.b64encode(bytes(range(256))))
                + b"id: %d\nevent: http.sse.crlf base64\ndata: %s\n\n" % (crlf, base64.b64encode(b"a\r\nb"))
                + b"id: %d\nevent: http.sse.empty\ndata: \n\n" % empty
                + b"id: %d\nevent: http.sse.end\ndata: end\n\n" % last)
    assert data == b": stream http.sse.>\n\n" + expected


def test_sse_last_event_id_backfills_what_was_missed(http_gateway):
    seqs = [publish(http_gateway, "http.backfill.x", b"missed %d" % i)["seq"] for i in range(3)]
    publish(http_gateway, "http.elsewhere", b"no")
    reader = SseReader(f"{base_url(http_gateway)}/v1/stream/http.backfill.%3E", f"Last-Event-ID: {seqs[0]}")
    try:
        reader.read_until(b"data: missed 2\n\n")
        live = publish(http_gateway, "http.backfill.x", b"live")["seq"]
        data = reader.read_until(b"data: live\n\n")
    finally:
        reader.close()
    assert data == (b": stream http.backfill.>\n\n"
                    + b"id: %d\nevent: http.backfill.x\ndata: missed 1\n\n" % seqs[1]
                    + b"id: %d\nevent: http.backfill.x\ndata: missed 2\n\n" % seqs[2]
                    + b"id: %d\nevent: http.backfill.x\ndata: live\n\n" % live)


def test_sse_backfill_on_a_gateway_that_has_routed_nothing_yet(module_backbone, tmp_path):
    """After a gateway restart its position is unknown: the backfill runs until it meets the live stream."""
    from fyrehose import Client
    from fyrehose.subjects.envelope import Envelope

    with Client(module_backbone.address, subscribe=False) as publisher:
        seqs = publisher.publish_many([Envelope("restart.x", b"before %d" % i) for i in range(3)])
    fresh = GatewayProcess("http", module_backbone.address, tmp_path).start()
    try:
        reader = SseReader(f"{base_url(fresh)}/v1/stream/restart.%3E", f"Last-Event-ID: {seqs[0]}")
        try:
            reader.read_until(b"data: before 2\n\n")
            live = publish(fresh, "restart.x", b"live")["seq"]
            data = reader.read_until(b"data: live\n\n")
        finally:
            reader.close()
        assert data == (b": stream restart.>\n\n"
                        + b"id: %d\nevent: restart.x\ndata: before 1\n\n" % seqs[1]
                        + b"id: %d\nevent: restart.x\ndata: before 2\n\n" % seqs[2]
                        + b"id: %d\nevent: restart.x\ndata: live\n\n" % live)
        assert psutil.Process(fresh.child.pid).num_threads() == 1  # the backfill is a greenlet's link, not a Client
    finally:
        fresh.stop()


def test_receiver_counts_include_every_local_subscriber(http_gateway):
    """HTTP and RESP publishes count RESP subscriptions and SSE streams alike, as Redis counts its clients."""
    reader = SseReader(f"{base_url(http_gateway)}/v1/stream/count.%2A")
    try:
        reader.read_until(b": stream count.*\n\n")
        assert publish(http_gateway, "count.a", b"x")["receivers"] == 1

        async def run() -> bytes:
            url = f"ws://{LOOPBACK}:{http_gateway.port}/resp"
            async with websockets.connect(url) as sub, websockets.connect(url) as pub:
                await sub.send(b"PSUBSCRIBE count.*\r\n")
                await recv(sub)
                await pub.send(b"PUBLISH count.a y\r\n")
                return await recv(pub)

        assert asyncio.run(run()) == b":2\r\n"
    finally:
        reader.close()


def test_sse_refuses_a_bad_pattern(http_gateway):
    assert status_of(f"{base_url(http_gateway)}/v1/stream/a.%3E.b")[0] == 400


# ---------------------------------------------------------------- RESP over WebSocket: Python websockets

HELLO3 = b"*2\r\n$5\r\nHELLO\r\n$1\r\n3\r\n"


async def recv(ws) -> bytes:
    return await asyncio.wait_for(ws.recv(), 10)


async def _resp_exchange(port: int) -> list[bytes]:
    url = f"ws://{LOOPBACK}:{port}/resp"
    async with websockets.connect(url) as ws, websockets.connect(url) as publisher:
        got = []
        await ws.send(b"PING\r\n")
        got.append(await recv(ws))
        # several commands in one message, inline and as arrays; a text message works too
        await ws.send("SUBSCRIBE ws.chan\r\n*2\r\n$10\r\nPSUBSCRIBE\r\n$4\r\nws.*\r\n")
        got += [await recv(ws), await recv(ws)]
        await publisher.send(b"*3\r\n$7\r\nPUBLISH\r\n$7\r\nws.chan\r\n$3\r\n\x00\xff\n\r\n")
        got += [await recv(publisher), await recv(ws), await recv(ws)]
        await ws.send(b"GET x\r\n")  # not allowed while subscribed in RESP2
        got.append(await recv(ws))
        await ws.send(b"QUIT\r\n")
        got.append(await recv(ws))
        with pytest.raises(websockets.ConnectionClosedOK):
            await recv(ws)
        assert ws.close_code == 1000
        return got


def test_resp_over_websocket_is_byte_exact(http_gateway):
    got = asyncio.run(_resp_exchange(http_gateway.port))
    assert got[:4] == [b"+PONG\r\n", b"*3\r\n$9\r\nsubscribe\r\n$7\r\nws.chan\r\n:1\r\n",
                       b"*3\r\n$10\r\npsubscribe\r\n$4\r\nws.*\r\n:2\r\n", b":2\r\n"]
    assert sorted(got[4:6]) == [b"*3\r\n$7\r\nmessage\r\n$7\r\nws.chan\r\n$3\r\n\x00\xff\n\r\n",
                                b"*4\r\n$8\r\npmessage\r\n$4\r\nws.*\r\n$7\r\nws.chan\r\n$3\r\n\x00\xff\n\r\n"]
    assert got[6].startswith(b"-ERR Can't execute 'get'")
    assert got[7] == b"+OK\r\n"


async def _resp3_with_sequences(port: int, gateway: GatewayProcess) -> tuple[list[bytes], int]:
    async with websockets.connect(f"ws://{LOOPBACK}:{port}/resp?seq=1") as ws:
        await ws.send(HELLO3 + b"SUBSCRIBE ws.seq\r\n")
        hello = await recv(ws)
        assert hello.startswith(b"%7\r\n")
        assert await recv(ws) == b">3\r\n$9\r\nsubscribe\r\n$6\r\nws.seq\r\n:1\r\n"
        seq = (await asyncio.to_thread(publish, gateway, "ws.seq", b"v"))["seq"]
        return [await recv(ws)], seq


def test_resp3_pushes_carry_the_sequence_when_asked(http_gateway):
    got, seq = asyncio.run(_resp3_with_sequences(http_gateway.port, http_gateway))
    assert got == [b"|1\r\n+seq\r\n:%d\r\n>3\r\n$7\r\nmessage\r\n$6\r\nws.seq\r\n$1\r\nv\r\n" % seq]


def test_http_publish_reaches_websocket_and_sse_in_one_order(http_gateway):
    async def run() -> list[bytes]:
        async with websockets.connect(f"ws://{LOOPBACK}:{http_gateway.port}/resp") as ws:
            await ws.send(b"SUBSCRIBE ws.order\r\n")
            await recv(ws)
            for i in range(50):
                await asyncio.to_thread(publish, http_gateway, "ws.order", b"%d" % i)
            return [await recv(ws) for _ in range(50)]

    got = asyncio.run(run())
    assert got == [b"*3\r\n$7\r\nmessage\r\n$8\r\nws.order\r\n$%d\r\n%d\r\n" % (len(str(i)), i) for i in range(50)]


def test_one_order_with_the_redis_gateway(http_gateway, module_backbone, tmp_path):
    """Publishes through the Redis gateway and over HTTP interleave in one order, the same for every subscriber."""
    import redis

    redis_gateway = GatewayProcess("redis", module_backbone.address, tmp_path).start()
    try:
        tcp = redis.Redis(host=LOOPBACK, port=redis_gateway.port, socket_timeout=10)
        pubsub = tcp.pubsub()
        pubsub.subscribe("mixed.order")
        assert pubsub.get_message(timeout=10)["type"] == "subscribe"

        async def run() -> list[bytes]:
            async with websockets.connect(f"ws://{LOOPBACK}:{http_gateway.port}/resp") as ws:
                await ws.send(b"SUBSCRIBE mixed.order\r\n")
                await recv(ws)
                for i in range(40):
                    if i % 2:
                        await asyncio.to_thread(tcp.publish, "mixed.order", b"redis-%d" % i)
                    else:
                        await asyncio.to_thread(publish, http_gateway, "mixed.order", b"http-%d" % i)
                return [(await recv(ws)).rsplit(b"\r\n", 2)[-2] for _ in range(40)]

        over_websocket = asyncio.run(run())
        over_tcp = []
        while len(over_tcp) < 40:
            message = pubsub.get_message(timeout=10)
            assert message is not None, over_tcp
            over_tcp.append(message["data"])
        assert over_websocket == over_tcp == [(b"redis-%d" if i % 2 else b"http-%d") % i for i in range(40)]
        pubsub.close()
        tcp.close()
    finally:
        redis_gateway.kill()


def test_the_npm_ws_client_unmodified(http_gateway):
    assert run_node("ws_resp_client.js", http_gateway.port).strip() == "ok"


# ---------------------------------------------------------------- origins

def _upgrade(port: int, *headers: str) -> bytes:
    with socket.create_connection((LOOPBACK, port), timeout=10) as sock:
        request = (f"GET /resp HTTP/1.1\r\nHost: {LOOPBACK}:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                   "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n")
        sock.sendall((request + "".join(h + "\r\n" for h in headers) + "\r\n").encode())
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
        return data


def test_upgrades_only_from_the_pages_own_origin(http_gateway):
    port = http_gateway.port
    accepted = _upgrade(port, f"Origin: http://{LOOPBACK}:{port}")
    assert accepted.startswith(b"HTTP/1.1 101 ")
    assert b"sec-websocket-accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n" in accepted  # RFC 6455's example key
    assert _upgrade(port).startswith(b"HTTP/1.1 101 ")  # no Origin: not a browser
    assert _upgrade(port, "Origin: http://evil.example").startswith(b"HTTP/1.1 403 ")
    assert _upgrade(port, f"Origin: http://{LOOPBACK}:{port + 1}").startswith(b"HTTP/1.1 403 ")


def test_allow_origin_option(module_backbone, tmp_path):
    gateway = GatewayProcess("http", module_backbone.address, tmp_path,
                             ["--allow-origin", "https://app.example"]).start()
    try:
        assert _upgrade(gateway.port, "Origin: https://app.example").startswith(b"HTTP/1.1 101 ")
        assert _upgrade(gateway.port, "Origin: https://other.example").startswith(b"HTTP/1.1 403 ")
    finally:
        gateway.stop()
    anyone = GatewayProcess("http", module_backbone.address, tmp_path, ["--allow-origin", "*"]).start()
    try:
        assert _upgrade(anyone.port, "Origin: https://other.example").startswith(b"HTTP/1.1 101 ")
    finally:
        anyone.stop()


def test_bench_reports_websocket_and_sse_subscribers():
    """The figures come from this command; here only its shape is checked, never a rate."""
    from support import run_cli

    result = run_cli("gateway", "bench", "--messages", "300", "--runs", "1", "--targets",
                     "websocket-gateway,sse-gateway", "--json", timeout=180)
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout)
    assert set(report["results"]) == {"websocket-gateway", "sse-gateway"} and report["subscribers"] == 4
    assert all(len(item["runs_msgs_per_s"]) == 1 and item["median_msgs_per_s"] > 0
               for item in report["results"].values())
