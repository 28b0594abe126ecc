"""What all gateways share: the channel/subject mapping, the echo filter, the `gateway` command,
one ordered stream across every gateway and the UDP client, and slow consumers."""
from __future__ import annotations

import argparse
import asyncio
import socket
import threading
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fyrehose.commands import gateway as command
from fyrehose.drivers.client import Client
from fyrehose.gateways.channels import (
    ENCODED_PREFIX,
    MAX_ENCODED_CHANNEL,
    ChannelError,
    channel_to_subject,
    subject_to_channel,
)
from fyrehose.gateways.echo import EchoFilter, HeldTooMuch
from fyrehose.subjects.envelope import check_subject

from gateway_support import GatewayProcess, MarlinClient, raw_subscriber
from support import EVENT_WITHIN, LOOPBACK, nats_flushed, run_cli, wait_until

# ---------------------------------------------------------------- channels <-> subjects


@given(st.binary(min_size=1, max_size=MAX_ENCODED_CHANNEL))
def test_every_channel_has_a_valid_subject_that_maps_back(channel):
    subject = channel_to_subject(channel)
    check_subject(subject)
    assert subject_to_channel(subject) == channel


token = st.text(st.characters(blacklist_categories=("Zs", "Zl", "Zp", "Cc", "Cs"), blacklist_characters=".*>"),
                min_size=1, max_size=8).filter(lambda text: not any(ch.isspace() for ch in text))


@given(st.lists(token, min_size=1, max_size=5).map(".".join))
def test_plain_subjects_are_channels_as_they_are(subject):
    if subject.startswith(ENCODED_PREFIX):
        return
    assert channel_to_subject(subject.encode()) == subject
    assert subject_to_channel(subject) == subject.encode()


def test_channels_that_are_not_subjects_are_encoded():
    for channel in (b"a b", b"a..b", b".a", b"a.", b"a.*", b"x>", b"\xff", b"_CHAN.YQ"):
        assert channel_to_subject(channel).startswith(ENCODED_PREFIX)
    assert channel_to_subject(b"user:42:events") == "user:42:events"
    with pytest.raises(ChannelError):
        channel_to_subject(b"")
    with pytest.raises(ChannelError):
        channel_to_subject(b" " * (MAX_ENCODED_CHANNEL + 1))


# ---------------------------------------------------------------- the echo filter


@given(st.data())
def test_echo_filter_passes_exactly_the_other_clients_messages_in_order(data):
    """Own messages may come back before or after their publish is confirmed; none gets through."""
    count = data.draw(st.integers(0, 40))
    own = [data.draw(st.booleans()) for _ in range(count)]
    own_seqs = [seq for seq in range(1, count + 1) if own[seq - 1]]
    batches, start = [], 0
    while start < len(own_seqs):
        size = data.draw(st.integers(1, 4))
        batches.append(own_seqs[start:start + size])
        start += size
    echo = EchoFilter(max_held=1 << 30)
    sent: list[int] = []
    position = 0  # the last sequence delivered
    next_seq = 1

    def deliver_until(limit: int) -> None:
        nonlocal next_seq, position
        while next_seq <= limit:
            frame = echo.offer(next_seq, str(next_seq).encode())
            if frame is not None:
                sent.append(int(frame))
            position = next_seq
            next_seq += 1

    for index, batch in enumerate(batches):
        deliver_until(data.draw(st.integers(next_seq - 1, batch[0] - 1)))  # the publish starts
        echo.publishing()
        # the confirmation comes before or after the messages; the next publish waits for it
        latest = batches[index + 1][0] - 1 if index + 1 < len(batches) else count
        deliver_until(data.draw(st.integers(next_seq - 1, latest)))
        sent.extend(int(frame) for frame in echo.published(batch, position))
    deliver_until(count)
    assert sent == [seq for seq in range(1, count + 1) if not own[seq - 1]]


def test_echo_filter_bounds_what_it_holds():
    echo = EchoFilter(max_held=10)
    echo.publishing()
    assert echo.offer(1, b"12345") is None
    with pytest.raises(HeldTooMuch):
        echo.offer(2, b"123456")


# ---------------------------------------------------------------- the command


def test_gateway_command_lists_every_kind_and_refuses_bad_arguments():
    shown = run_cli("gateway", "--help")
    assert shown.returncode == 0
    for kind in ("redis", "nats", "marlin", "lumberjack", "bench"):
        assert kind.encode() in shown.stdout
    bad = run_cli("gateway", "redis", "--listen", "nowhere:port")
    assert bad.returncode == 1 and len(bad.stderr.strip().splitlines()) == 1
    assert b"not a number" in bad.stderr
    usage = run_cli("gateway", "nats", "--max-pending", "0")
    assert usage.returncode == 2 and b"positive" in usage.stderr


def test_a_kind_that_cannot_be_imported_breaks_only_itself(monkeypatch):
    monkeypatch.setitem(command.KINDS, "broken", "fyrehose.gateways.no_such_kind")
    parser = argparse.ArgumentParser(prog="fyrehose gateway")
    command.add_arguments(parser)
    args = parser.parse_args(["broken", "--listen", "127.0.0.1:1"])
    with pytest.raises(RuntimeError, match="no_such_kind"):
        command.run(args)
    assert parser.parse_args(["redis", "--max-pending", "100"]).max_pending == 100


def test_unreachable_backbone_is_one_line(tmp_path):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as silent:
        silent.bind((LOOPBACK, 0))
        result = run_cli("gateway", "marlin", "--listen", f"{LOOPBACK}:0",
                         "--backbone", f"{LOOPBACK}:{silent.getsockname()[1]}")
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [result.stderr.strip().splitlines()[-1]]
    assert b"no KEEPALIVE-ACK" in result.stderr


# ---------------------------------------------------------------- one ordered stream


def test_every_gateway_and_the_udp_client_see_one_order(gateways, module_backbone):
    """Messages published through each gateway and the UDP client reach the subscribers of all, in order."""
    import nats
    import redis

    subject = "mix.orders"
    per_source = 25
    redis_client = redis.Redis(*gateways["redis"].address, socket_timeout=10)
    redis_sub = redis_client.pubsub()
    redis_sub.subscribe(subject)
    assert redis_sub.get_message(timeout=5)["type"] == "subscribe"
    marlin_sub = MarlinClient(gateways["marlin"].address)
    marlin_sub.subscribe(subject.encode())
    assert marlin_sub.read()[:2] == ("response", True)
    marlin_pub = MarlinClient(gateways["marlin"].address)
    udp = Client(module_backbone.address)
    udp_stream = udp.subscribe(subject, on_loss="yield")

    async def exercise() -> list[bytes]:
        nc = await nats.connect(f"nats://{LOOPBACK}:{gateways['nats'].port}")
        sub = await nc.subscribe(subject)
        await nats_flushed(nc)
        for index in range(per_source):
            await nc.publish(subject, b"nats-%d" % index)
            redis_client.publish(subject, b"redis-%d" % index)
            marlin_pub.publish(subject.encode(), b"marlin-%d" % index, message_id=index)
            udp.publish(b"udp-%d" % index, subject=subject)
        await nc.flush()
        got = []
        while len(got) < 4 * per_source:
            got.append((await sub.next_msg(timeout=10)).data)
        await nc.close()
        return got

    nats_got = asyncio.run(exercise())
    redis_got = []
    deadline = time.monotonic() + 10
    while len(redis_got) < 4 * per_source and time.monotonic() < deadline:
        message = redis_sub.get_message(timeout=1)
        if message and message["type"] == "message":
            redis_got.append(message["data"])
    marlin_got, marlin_ids = [], []
    while len(marlin_got) < 4 * per_source:
        frame = marlin_sub.read(timeout=10)
        assert frame is not None and frame[0] == "message", frame
        marlin_ids.append(frame[1])
        marlin_got.append(frame[3])
    udp_got = []
    while len(udp_got) < 4 * per_source:
        event = udp_stream.get(timeout=10)
        assert event is not None and event.subject == subject, event
        udp_got.append(event.data)
    for source in (b"nats", b"redis", b"marlin", b"udp"):
        assert [item for item in nats_got if item.startswith(source)] == \
            [b"%s-%d" % (source, index) for index in range(per_source)]
    assert redis_got == nats_got == marlin_got == udp_got
    assert marlin_ids == sorted(marlin_ids)  # Marlin ids are the backbone sequence numbers
    udp.close()
    marlin_pub.close()
    marlin_sub.close()
    redis_sub.close()
    redis_client.close()


# ---------------------------------------------------------------- slow consumers


def _read_until_closed(sock: socket.socket, timeout: float) -> bool:
    """Whether the gateway closed the connection (read whatever it had sent before)."""
    sock.settimeout(timeout)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            chunk = sock.recv(1 << 20)
        except (ConnectionResetError, BrokenPipeError):
            return True
        except TimeoutError:
            return False
        if not chunk:
            return True
    return False


@pytest.mark.parametrize("kind", ["redis", "nats", "marlin"])
def test_a_slow_consumer_is_disconnected_and_memory_stays_bounded(kind, module_backbone, tmp_path):
    gateway = GatewayProcess(kind, module_backbone.address, tmp_path, ["--max-pending", str(2 << 20)]).start()
    try:
        channel = b"slow.lane"
        stalled = raw_subscriber(kind, gateway.address, channel, receive_buffer=4096)  # never read
        healthy = raw_subscriber(kind, gateway.address, channel)
        received = [0]
        stop = threading.Event()

        def drain() -> None:
            healthy.settimeout(0.2)
            while not stop.is_set():
                try:
                    chunk = healthy.recv(1 << 20)
                except TimeoutError:
                    continue
                if not chunk:
                    return
                received[0] += len(chunk)

        reader = threading.Thread(target=drain, daemon=True)
        reader.start()
        time.sleep(0.3)  # both subscriptions are in place
        baseline = gateway.rss()
        payload = b"x" * 60000
        messages, window = 1000, 5  # 60 MB through a client that reads nothing
        with Client(module_backbone.address, subscribe=False) as publisher:
            for start in range(0, messages, window):
                publisher.publish_many([payload] * window, subject=channel.decode())
                # the healthy reader keeps up: it is never more than a window behind
                assert wait_until(lambda start=start: received[0] >= start * len(payload), timeout=EVENT_WITHIN), (received[0], start)
        assert wait_until(lambda: received[0] >= messages * len(payload), timeout=EVENT_WITHIN)
        assert wait_until(lambda: "slow consumer" in gateway.log_text(), timeout=EVENT_WITHIN), gateway.log_text()
        assert _read_until_closed(stalled, timeout=10)
        assert gateway.rss() - baseline < 24 << 20
        stop.set()
        reader.join(2)
        healthy.close()
        stalled.close()
        assert gateway.alive()
        with socket.create_connection(gateway.address, timeout=5):
            pass  # still serving
    finally:
        gateway.kill()


def test_bench_command_reports_every_target_it_was_given():
    """The figure comes from this command; here only its shape is checked, never a rate."""
    import json

    result = run_cli("gateway", "bench", "--messages", "200", "--runs", "1", "--targets",
                     "redis-server,marlin-gateway", "--json", timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout)
    assert set(report["results"]) == {"redis-server", "marlin-gateway"}
    assert all(len(item["runs_msgs_per_s"]) == 1 and item["median_msgs_per_s"] > 0
               for item in report["results"].values())
    assert report["machine"]["cores"] >= 1 and report["subscribers"] == 4


def test_bench_command_runs_the_users_tools_against_each_server_and_gateway():
    """redis-benchmark at -P 1, -P 16 and -c 1, nats.js's bench.js, both sides per round, and the HTTP gateway's
    single client; only the shape is checked."""
    import json

    result = run_cli("gateway", "bench", "--messages", "200", "--runs", "2", "--targets",
                     "redis-server,redis-gateway,nats-server,nats-gateway,http-gateway",
                     "--redis-benchmark-requests", "2000", "--nats-bench-count", "2000",
                     "--single-client-requests", "300", "--json", timeout=240)
    assert result.returncode == 0, result.stderr[-2000:]
    tools = json.loads(result.stdout)["tools"]
    assert tools["size"] == 64 and tools["redis_benchmark_clients"] == 50
    http = "HTTP POST /v1/publish, 1 client kept alive"
    assert set(tools["results"]) == {"redis-benchmark -P 1", "redis-benchmark -P 16", "redis-benchmark -c 1 -P 1",
                                     "nats.js bench --pub --sub", http}
    only = tools["results"].pop(http)["targets"]
    assert set(only) == {"http-gateway"} and only["http-gateway"]["p50_ms"]["median"] > 0
    for name, section in tools["results"].items():
        server, gateway = ("nats-server", "nats-gateway") if name.startswith("nats") else ("redis-server",
                                                                                           "redis-gateway")
        assert set(section["targets"]) == {server, gateway}
        for target in (server, gateway):
            result_of = section["targets"][target]
            assert len(result_of["runs"]) == 2
            assert 0 < result_of["rate"]["min"] <= result_of["rate"]["median"] <= result_of["rate"]["max"]
            assert result_of["cpu_us_per_message"]["median"] >= 0  # clock ticks: a short run may show none
        assert section["ratio_gateway_to_server"]["median"] > 0
        if name.startswith("redis"):
            assert section["targets"][gateway]["p50_ms"]["median"] > 0