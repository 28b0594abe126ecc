"""``fyrehose gateway lumberjack`` as a process, with a real backbone, pylogbeat and hand-built Lumberjack frames."""
from __future__ import annotations

import json
import re
import socket
import struct
import subprocess
import threading
import time
import zlib
from collections.abc import Callable
from pathlib import Path

import orjson
import psutil
import pylogbeat
import pytest
from node_clients import run_node

from fyrehose import Client, Lost
from fyrehose.gateways.lumberjack.protocol import (
    VERSION_1,
    VERSION_2,
    decode_acks,
    encode_compressed,
    encode_json,
    encode_key_value,
    encode_window,
)
from fyrehose.subjects.envelope import decode

from gateway_support import GatewayProcess
from support import EVENT_WITHIN, FYREHOSE, LOOPBACK, JournalProcess, make_certificates


@pytest.fixture
def gateway_factory(tmp_path):
    started: list[GatewayProcess] = []

    def start(backbone, *extra: str) -> GatewayProcess:
        gateway = GatewayProcess("lumberjack", backbone.address, tmp_path, list(extra)).start()
        started.append(gateway)
        return gateway

    yield start
    for gateway in started:
        gateway.kill()


class Recorder:
    """A subscriber that keeps every message it is delivered, through backbone restarts (the in-memory journal)."""

    def __init__(self, backbone_addr) -> None:
        self.client = Client(backbone_addr, give_up_after=3.0)
        self.stream = self.client.subscribe(from_seq=1, on_loss="yield")  # from the first sequence: a complete history
        self.messages: list = []  # (seq, envelope)
        self.lost = 0
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            event = self.stream.get(timeout=0.5)
            if event is None:
                if self.client._closed:
                    return
                continue
            if isinstance(event, Lost):
                self.lost += event.count
            else:
                self.messages.append((event.seq, decode(event.data)))

    def documents(self) -> list[dict]:
        return [orjson.loads(envelope.data) for _, envelope in list(self.messages)]

    def wait_for(self, count: int, timeout: float = 15.0) -> list[dict]:
        deadline = time.monotonic() + timeout
        while len(self.messages) < count and time.monotonic() < deadline:
            time.sleep(0.02)
        return self.documents()

    def has(self, document: dict, timeout: float = 15.0) -> bool:
        deadline = time.monotonic() + timeout
        while document not in self.documents():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.02)
        return True

    def close(self) -> None:
        self.client.close()
        self._thread.join(5)


@pytest.fixture
def recorder_factory():
    recorders: list[Recorder] = []

    def start(backbone) -> Recorder:
        recorders.append(Recorder(backbone.addr))
        return recorders[-1]

    yield start
    for recorder in recorders:
        recorder.close()


def beats_client(gateway: GatewayProcess, **tls) -> pylogbeat.PyLogBeatClient:
    return pylogbeat.PyLogBeatClient(LOOPBACK, gateway.port, timeout=20, **tls)


def exchange(gateway: GatewayProcess, data: bytes, *, half_close: bool = False, until_ack: int | None = None,
             until: Callable[[list[tuple[int, int]]], bool] | None = None,
             timeout: float = 15.0) -> tuple[list[tuple[int, int]], bool]:
    """Send raw bytes; read acks until ``until_ack`` arrives (or ``until(acks)`` holds) or the gateway closes.
    (acks, closed by gateway)."""
    acks: list[tuple[int, int]] = []
    received = b""
    with socket.create_connection((LOOPBACK, gateway.port), timeout=timeout) as sock:
        sock.sendall(data)
        if half_close:
            sock.shutdown(socket.SHUT_WR)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                chunk = sock.recv(4096)
            except ConnectionResetError:
                return acks, True
            if not chunk:
                return acks, True
            received += chunk
            usable = len(received) - len(received) % 6
            acks += decode_acks(received[:usable])
            received = received[usable:]
            if until_ack is not None and any(seq == until_ack for _, seq in acks):
                return acks, False
            if until is not None and until(acks):
                return acks, False
    raise AssertionError(f"no end of the exchange within {timeout} s; acks so far {acks}")


def json_frame(seq: int, document: dict, version: int = VERSION_2) -> bytes:
    return encode_json(seq, orjson.dumps(document), version)


# ---------------------------------------------------------------- publishing


def test_pylogbeat_batches_are_published_in_order_with_subjects_from_the_beat(backbone, gateway_factory,
                                                                              recorder_factory):
    gateway = gateway_factory(backbone)
    recorder = recorder_factory(backbone)
    batches = [
        [{"message": f"line {n}", "@metadata": {"beat": "filebeat"}, "n": n} for n in range(5)],
        [{"message": "m", "@metadata": {"beat": "metric beat"}, "n": n} for n in range(5, 1305)],  # > 2 chunks
        [{"message": "no beat here", "n": 1305}],
    ]
    with beats_client(gateway) as client:
        for batch in batches:
            client.send(batch)  # returns once the whole batch is acked
    sent = [event for batch in batches for event in batch]
    assert recorder.wait_for(len(sent)) == sent
    subjects = [envelope.subject for _, envelope in recorder.messages]
    assert subjects == ["filebeat"] * 5 + ["metric_beat"] * 1300 + ["lumberjack"]
    seqs = [seq for seq, _ in recorder.messages]
    assert seqs == sorted(seqs)


def test_seed_v1_key_value_frames_plain_and_compressed(backbone, gateway_factory, recorder_factory):
    gateway = gateway_factory(backbone, "--subject-field", "type", "--default-subject", "v1.other")
    recorder = recorder_factory(backbone)
    plain = encode_window(3, VERSION_1) + b"".join(
        encode_key_value(seq, {"type": "syslog", "line": f"l{seq}"}) for seq in (1, 2, 3))
    acks, closed = exchange(gateway, plain, until_ack=3)
    assert not closed and acks[-1] == (VERSION_1, 3)
    compressed = encode_window(2, VERSION_1) + encode_compressed(
        [encode_key_value(4, {"line": "l4"}), encode_key_value(5, {"type": "a.b", "line": "l5"})], VERSION_1)
    acks, closed = exchange(gateway, compressed, until_ack=5)
    assert not closed and all(version == VERSION_1 for version, _ in acks) and acks[-1] == (VERSION_1, 5)
    documents = recorder.wait_for(5)
    assert [document["line"] for document in documents] == ["l1", "l2", "l3", "l4", "l5"]
    assert [envelope.subject for _, envelope in recorder.messages] == ["syslog"] * 3 + ["v1.other", "a.b"]


def test_pipelined_windows_with_restarting_sequences_are_acked_per_window(backbone, gateway_factory,
                                                                         recorder_factory):
    gateway = gateway_factory(backbone)
    recorder = recorder_factory(backbone)
    stream = encode_window(2) + encode_compressed([json_frame(1, {"w": 1, "n": 1}), json_frame(2, {"w": 1, "n": 2})]) \
        + encode_window(3) + encode_compressed([json_frame(seq, {"w": 2, "n": seq}) for seq in (1, 2, 3)])
    acks, closed = exchange(gateway, stream, until_ack=3)
    assert not closed
    seqs = [seq for _, seq in acks]
    first_window_done = seqs.index(2)  # window 1 is acked up to its last event before window 2 is acked at all
    assert seqs[:first_window_done] == sorted(seqs[:first_window_done])
    assert seqs[first_window_done + 1:] == sorted(seqs[first_window_done + 1:]) and seqs[-1] == 3
    assert recorder.wait_for(5) == [{"w": 1, "n": 1}, {"w": 1, "n": 2}, {"w": 2, "n": 1}, {"w": 2, "n": 2},
                                    {"w": 2, "n": 3}]


# ---------------------------------------------------------------- senders as they are: the window is advisory


def streaming(gateway: GatewayProcess, data: bytes, last_seq: int, timeout: float = 30.0) -> list[tuple[int, int]]:
    """Send ``data`` from a thread while reading acks, as a streaming writer does, until ``last_seq`` is acked."""
    with socket.create_connection((LOOPBACK, gateway.port), timeout=timeout) as sock:
        sender = threading.Thread(target=sock.sendall, args=(data,), daemon=True)
        sender.start()
        acks: list[tuple[int, int]] = []
        received = b""
        deadline = time.monotonic() + timeout
        while not any(seq == last_seq for _, seq in acks):
            assert time.monotonic() < deadline, f"no ack {last_seq} in {timeout} s; acks so far {acks[-5:]}"
            chunk = sock.recv(4096)
            assert chunk, "the gateway closed the connection"
            received += chunk
            usable = len(received) - len(received) % 6
            acks += decode_acks(received[:usable])
            received = received[usable:]
        sender.join(timeout)
    return acks


def test_a_v1_forwarder_keeps_several_windows_in_flight(backbone, gateway_factory, recorder_factory):
    gateway = gateway_factory(backbone)
    recorder = recorder_factory(backbone)
    count = 5000
    stream = encode_window(1000, VERSION_1) + b"".join(
        encode_key_value(seq, {"line": f"l{seq}"}) for seq in range(1, count + 1))
    acks = streaming(gateway, stream, count)
    assert all(version == VERSION_1 for version, _ in acks)
    assert [seq for _, seq in acks] == sorted(seq for _, seq in acks)
    assert [document["line"] for document in recorder.wait_for(count)] == [f"l{seq}" for seq in range(1, count + 1)]
    assert "window" not in gateway.output()


def test_reading_pauses_at_the_byte_limit_instead_of_closing(backbone_factory, gateway_factory, recorder_factory):
    backbone = backbone_factory()
    gateway = gateway_factory(backbone, "--max-pending-bytes", "4096", "--publish-timeout", "1")
    recorder = recorder_factory(backbone)
    backbone.kill()  # nothing can be published: unpublished events pile up to the limit, then reading pauses
    count = 2000
    stream = encode_window(10) + b"".join(json_frame(seq, {"n": seq, "pad": "x" * 64}) for seq in range(1, count + 1))
    result: list = []
    worker = threading.Thread(target=lambda: result.append(streaming(gateway, stream, count, timeout=60)), daemon=True)
    worker.start()
    time.sleep(1.5)
    backbone_factory(port=backbone.port, state_dir=backbone.state_dir)
    worker.join(60)
    assert result, "the stream was not acked to its end"
    assert [document["n"] for document in recorder.wait_for(count)] == list(range(1, count + 1))
    assert gateway.stop() == 0
    assert re.search(r"reads paused [1-9]", gateway.output()), gateway.output()
    assert "protocol errors" not in gateway.output()


def windows_acked(acks: list[tuple[int, int]], sizes: list[int]) -> int:
    """How many of the windows of ``sizes`` (each numbered from 1) ``acks`` acknowledge whole, checking that the
    acks go window by window, in order, each window's rising to its last sequence and never past it
    (``A 0``, the keepalive of a waiting window, aside)."""
    seqs = [seq for _, seq in acks if seq != 0]
    window = previous = 0
    for seq in seqs:
        assert window < len(sizes), f"an ack after the last window: {seqs}"
        assert previous < seq <= sizes[window], f"ack {seq} out of order in window {window} of {sizes}: {seqs}"
        previous = seq
        if seq == sizes[window]:
            window, previous = window + 1, 0
    return window


def test_beats_windows_grow_and_shrink_with_every_compression_level(backbone, gateway_factory, recorder_factory):
    gateway = gateway_factory(backbone)
    recorder = recorder_factory(backbone)
    stream = b""
    expected = []
    sizes = []
    for level in range(10):
        size = [3, 1, 8, 2, 5][level % 5]
        sizes.append(size)
        frames = [json_frame(seq, {"level": level, "seq": seq}) for seq in range(1, size + 1)]
        expected += [{"level": level, "seq": seq} for seq in range(1, size + 1)]
        stream += encode_window(size) + encode_compressed(frames, level=level)
    sizes.append(1)
    acks, closed = exchange(gateway, stream + encode_window(1) + json_frame(1, {"end": True}),
                            until=lambda acks: windows_acked(acks, sizes) == len(sizes), timeout=30)
    assert not closed
    assert windows_acked(acks, sizes) == len(sizes)  # every window acked to its end, one after the other
    assert {version for version, _ in acks} == {VERSION_2}
    assert recorder.wait_for(len(expected) + 1) == expected + [{"end": True}]


def test_a_partial_window_is_acked_once_the_input_drains(backbone, gateway_factory, recorder_factory):
    gateway = gateway_factory(backbone)
    recorder = recorder_factory(backbone)
    acks, closed = exchange(gateway, encode_window(1000) + json_frame(1, {"p": 1}) + json_frame(2, {"p": 2}),
                            until_ack=2)
    assert not closed and acks[-1] == (VERSION_2, 2)
    assert recorder.wait_for(2) == [{"p": 1}, {"p": 2}]


def test_a_long_running_batch_is_kept_alive(backbone_factory, gateway_factory):
    backbone = backbone_factory()
    gateway = gateway_factory(backbone, "--client-inactivity-timeout", "0.5")
    backbone.kill()
    with socket.create_connection((LOOPBACK, gateway.port), timeout=20) as sock:
        sock.sendall(encode_window(1) + json_frame(1, {"waits": True}))
        # 'A 0' while the batch waits, as Logstash sends; the writer waiting for its acks is not inactive,
        # though it says nothing for ten times the inactivity timeout before the first 'A 0' comes
        assert decode_acks(sock.recv(6)) == [(VERSION_2, 0)]
    assert "--client-inactivity-timeout" not in gateway.output()


def hung_up(sock: socket.socket) -> bool:
    """True once the gateway closes ``sock`` (end of file or reset); False if it sends something instead, or
    nothing at all within the socket's timeout."""
    try:
        return sock.recv(64) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def test_silent_connections_are_closed_and_steady_writers_are_not(backbone_factory, gateway_factory,
                                                                  recorder_factory):
    backbone = backbone_factory()
    gateway = gateway_factory(backbone, "--client-inactivity-timeout", "1")
    recorder = recorder_factory(backbone)
    silent = [socket.create_connection(gateway.address, timeout=20) for _ in range(5)]
    windows = 12
    with socket.create_connection(gateway.address, timeout=20) as steady:
        for seq in range(1, windows + 1):  # a window every 0.2 s: 2.4 s in all, well past the timeout
            steady.sendall(encode_window(1) + json_frame(seq, {"steady": seq}))
            assert decode_acks(steady.recv(6)) == [(VERSION_2, seq)], f"window {seq} not acked"
            time.sleep(0.2)
    for sock in silent:
        assert hung_up(sock), "a silent connection was not closed within 20 s"
        sock.close()
    assert [document["steady"] for document in recorder.wait_for(windows)] == list(range(1, windows + 1))
    assert gateway.stop() == 0
    log = gateway.output()
    assert "nothing received for 1 s (--client-inactivity-timeout), connection closed" in log
    # five silent sockets closed within a second of each other: fewer than five lines (once a second)
    assert 1 <= log.count("(--client-inactivity-timeout)") < len(silent), log
    assert re.search(r"inactive connections closed 5\b", log), log


# ---------------------------------------------------------------- bad input


def bomb() -> bytes:
    squeezer = zlib.compressobj(9)
    packed = b"".join(squeezer.compress(bytes(1 << 20)) for _ in range(16)) + squeezer.flush()  # 16 MiB of zeros
    return b"2C" + struct.pack(">I", len(packed)) + packed


BAD_INPUTS = {
    # name: (bytes after a valid window holding one good event, close our side after sending?, log text)
    "unknown version": (b"3J\0\0\0\2\0\0\0\2{}", False, "unknown protocol version"),
    "unknown frame type": (b"2X", False, "unknown frame type"),
    "window 0": (b"2W\0\0\0\0", False, "window size 0"),
    "oversize frame": (b"2J\0\0\0\2" + struct.pack(">I", 1 << 30), False, "exceeds the limit"),
    "truncated frame": (json_frame(2, {"case": "truncated frame", "n": 2})[:-3], True, "closed inside a frame"),
    "compression bomb": (bomb(), False, "inflates beyond the limit"),
    "invalid JSON": (encode_json(2, b'{"n": 2'), False, "invalid JSON"),
}


def test_bad_input_closes_only_that_connection_and_nothing_unpublished_is_acked(backbone, gateway_factory,
                                                                               recorder_factory):
    gateway = gateway_factory(backbone, "--max-compressed-bytes", str(8 << 20))
    recorder = recorder_factory(backbone)
    for case, (bad, half_close, log_text) in BAD_INPUTS.items():
        good = encode_window(5) + json_frame(1, {"case": case, "n": 1})
        acks, closed = exchange(gateway, good + bad, half_close=half_close)
        assert closed, case
        assert set(acks) <= {(VERSION_2, 1), (VERSION_2, 0)}, (case, acks)
        if (VERSION_2, 1) in acks:  # acked: must be published
            assert recorder.has({"case": case, "n": 1}), case
        assert gateway.output().count(log_text) >= 1, (case, gateway.output())
        assert gateway.alive(), case
    assert gateway.output().count("bad input, connection closed") == len(BAD_INPUTS)
    assert all(document["n"] == 1 for document in recorder.documents()), "nothing after the bad frame is published"
    with beats_client(gateway) as client:
        client.send([{"after": "bad input"}])
    assert recorder.has({"after": "bad input"})


# ---------------------------------------------------------------- acks and the backbone


def test_no_ack_before_the_backbone_confirms(backbone_factory, gateway_factory, recorder_factory):
    backbone = backbone_factory()
    gateway = gateway_factory(backbone)
    recorder = recorder_factory(backbone)
    backbone.kill()
    with socket.create_connection((LOOPBACK, gateway.port), timeout=20) as sock:
        sock.sendall(encode_window(1) + json_frame(1, {"waited": True}))
        acks = []
        sock.settimeout(0.2)
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:  # only keep-alive acks while nothing can be published
            try:
                acks += decode_acks(sock.recv(6))
            except TimeoutError:
                continue
        assert set(acks) <= {(VERSION_2, 0)}
        backbone_factory(port=backbone.port, state_dir=backbone.state_dir)
        sock.settimeout(20)
        while (VERSION_2, 1) not in acks:
            reply = sock.recv(6)
            assert reply, "the gateway closed the connection instead of acking"
            acks += decode_acks(reply)
    assert set(acks) <= {(VERSION_2, 0), (VERSION_2, 1)}
    assert recorder.wait_for(1) == [{"waited": True}]


def test_a_late_subscriber_recovers_acked_events_from_the_gateway(backbone, gateway_factory, recorder_factory):
    gateway = gateway_factory(backbone)
    with beats_client(gateway) as client:  # nobody subscribes: only the gateway holds these now
        client.send([{"early": n} for n in range(10)])
    late = recorder_factory(backbone)
    assert late.wait_for(10) == [{"early": n} for n in range(10)]
    assert late.lost == 0


def test_the_gateway_is_one_thread_while_shipping(backbone, gateway_factory, recorder_factory):
    """Connections and the backbone link (publishing, FORWARDs) are greenlets of the hub's thread: no thread pool,
    no client threads."""
    gateway = gateway_factory(backbone)
    recorder = recorder_factory(backbone)
    process = psutil.Process(gateway.child.pid)
    shipped = threading.Event()

    def ship() -> None:
        with beats_client(gateway) as client:
            for number in range(0, 2000, 100):
                client.send([{"n": number + k} for k in range(100)])
        shipped.set()

    shipper = threading.Thread(target=ship, daemon=True)
    shipper.start()
    threads = [process.num_threads()]
    while not shipped.is_set() and len(threads) < 20_000:
        threads.append(process.num_threads())
        time.sleep(0.001)
    shipper.join(30)
    threads.append(process.num_threads())
    assert shipped.is_set()
    assert set(threads) == {1}, f"thread counts seen: {sorted(set(threads))}"
    assert [document["n"] for document in recorder.wait_for(2000)] == list(range(2000))


def journaled_ids(directory: Path) -> set[int]:
    """The "id" of every event journaled so far (the records hold binary envelopes, so no line splitting)."""
    result = subprocess.run(FYREHOSE + ["journal", "inspect", str(directory), "--records", "1..1000000"],
                            capture_output=True, timeout=60)
    assert result.returncode == 0, result.stderr.decode(errors="replace")
    return {int(number) for number in re.findall(rb'"id":(\d+)', result.stdout)}


def test_backbone_kill9_mid_stream_every_acked_event_is_in_the_journal(backbone_factory, gateway_factory, tmp_path):
    backbone = backbone_factory()
    # What the journal missed it REQUESTs until the gateway, which holds every message it had CONFIRMed, answers:
    # on a busy machine that takes seconds, and a journal that gave up sooner (it once had 3 s) records acked events
    # as lost.  The journal also waits this long for the numbers the killed backbone had reserved but never issued
    # (nobody can send them) before it writes what follows them, so the test takes about this long, not longer.
    give_up = 30.0
    journal = JournalProcess(backbone.address, tmp_path / "journal", "--from", "1", "--no-parquet",
                             "--give-up", str(give_up)).start()
    try:
        gateway = gateway_factory(backbone)
        acked: list[int] = []
        stop = threading.Event()
        failure: list[BaseException] = []

        def ship() -> None:
            try:
                with beats_client(gateway) as client:
                    number = 0
                    while not stop.is_set() and number < 20_000:
                        batch = [{"id": number + k, "message": "x" * 100} for k in range(20)]
                        client.send(batch)  # returns once the gateway acked the whole batch
                        acked.extend(event["id"] for event in batch)
                        number += len(batch)
            except BaseException as exc:  # reported by the test thread
                failure.append(exc)

        shipper = threading.Thread(target=ship, daemon=True)
        shipper.start()
        deadline = time.monotonic() + EVENT_WITHIN
        while len(acked) < 400 and time.monotonic() < deadline:
            time.sleep(0.01)
        backbone.kill()  # kill -9 while batches are in flight
        killed_at = len(acked)
        time.sleep(0.5)
        backbone_factory(port=backbone.port, state_dir=backbone.state_dir)
        deadline = time.monotonic() + EVENT_WITHIN
        while len(acked) < killed_at + 400 and time.monotonic() < deadline and not failure:
            time.sleep(0.01)
        stop.set()
        shipper.join(EVENT_WITHIN)
        assert not failure, failure
        assert len(acked) >= killed_at + 400, "shipping did not resume after the restart"
        wanted = set(acked)
        deadline = time.monotonic() + give_up + EVENT_WITHIN
        while not wanted <= journaled_ids(journal.directory) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert gateway.alive()
    finally:
        journal.stop()
    missing = wanted - journaled_ids(journal.directory)
    assert not missing, f"{len(missing)} acked events are not in the journal: {sorted(missing)[:20]}"


# ---------------------------------------------------------------- TLS


@pytest.fixture(scope="session")
def certificates(tmp_path_factory) -> dict[str, str]:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, made with the openssl command."""
    return make_certificates(tmp_path_factory.mktemp("tls"), ("client",))


def test_tls_with_required_client_certificates(backbone, gateway_factory, recorder_factory, certificates):
    gateway = gateway_factory(backbone, "--tls-cert", certificates["server.pem"], "--tls-key",
                              certificates["server.key"], "--tls-ca", certificates["ca.pem"])
    recorder = recorder_factory(backbone)
    verified = {"ssl_enable": True, "ssl_verify": True, "ca_certs": certificates["ca.pem"]}
    with beats_client(gateway, certfile=certificates["client.pem"], keyfile=certificates["client.key"],
                      **verified) as client:
        client.send([{"secure": n} for n in range(3)])
    assert recorder.wait_for(3) == [{"secure": n} for n in range(3)]

    with pytest.raises((OSError, pylogbeat.ConnectionException)):
        with beats_client(gateway, **verified) as client:  # no client certificate
            client.send([{"secure": "no certificate"}])
    acks, closed = exchange(gateway, encode_window(1) + json_frame(1, {"secure": "plain TCP"}))
    assert closed and not acks
    deadline = time.monotonic() + 5
    while gateway.output().count("TLS handshake failed") < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert gateway.output().count("TLS handshake failed") == 2 and gateway.alive()
    time.sleep(0.3)
    assert len(recorder.messages) == 3


def test_the_npm_lumberjack_protocol_v1_sender_streams_ten_windows_ahead(backbone, gateway_factory, recorder_factory,
                                                                         certificates):
    gateway = gateway_factory(backbone, "--tls-cert", certificates["server.pem"], "--tls-key",
                              certificates["server.key"])
    recorder = recorder_factory(backbone)
    count, window = 3000, 100
    output = run_node("lumberjack_v1_sender.js", gateway.port, certificates["ca.pem"], count, window)
    acked, dropped, in_flight = (int(value) for value in output.split()[1::2])
    assert acked == count and dropped == 0
    assert in_flight > window  # several windows were in flight at once, and the gateway kept acking
    documents = recorder.wait_for(count)
    assert [document["line"] for document in documents] == [f"event {n}" for n in range(1, count + 1)]
    assert "bad input" not in gateway.output()


EVERY_CODE_POINT = "".join(map(chr, range(256)))  # U+0000..U+00FF: what the npm client makes of 256 values


def npm_events(gateway: GatewayProcess, certificates: dict[str, str], mode: str, events: list[dict],
               directory: Path) -> str:
    """Send ``events`` with tests/node/lumberjack_v1_events.js; its output line."""
    path = directory / f"events-{mode}.json"
    path.write_text(json.dumps(events))  # ASCII with \u escapes: every string survives as it is
    return run_node("lumberjack_v1_events.js", gateway.port, certificates["ca.pem"], mode, path).strip()


def test_the_npm_lumberjack_sender_delivers_every_code_point_byte_exact(backbone, gateway_factory, recorder_factory,
                                                                         certificates, tmp_path):
    # The npm client takes strings and writes them as UTF-8 (it cannot send other bytes, and Lumberjack "D"
    # values must be UTF-8): every code point U+0000..U+00FF, control characters, quotes, backslashes,
    # U+2028, a BOM and an astral character, in keys and values, must arrive as those exact UTF-8 bytes.
    gateway = gateway_factory(backbone, "--tls-cert", certificates["server.pem"], "--tls-key",
                              certificates["server.key"])
    recorder = recorder_factory(backbone)
    events = [
        {"line": "every code point below 256", "bytes": EVERY_CODE_POINT, "host": "npm-sender"},
        {"line": "keys too", "cl\u00e9 \u043a\u043b\u044e\u0447 \U0001f511 \u0000\xff":
            "wide \u2028\ufeff\U0001f600 \\ \" end", "host": "npm-sender"},
        {"line": "long", "bytes": EVERY_CODE_POINT * 100, "host": "npm-sender"},
    ]
    assert npm_events(gateway, certificates, "send", events, tmp_path) == f"acked {len(events)}"
    assert recorder.wait_for(len(events)) == events
    assert [envelope.data for _, envelope in recorder.messages] == [orjson.dumps(event) for event in events]
    delivered = orjson.loads(recorder.messages[0][1].data)["bytes"].encode()
    assert delivered == bytes(range(128)) + bytes(byte for code in range(128, 256)
                                                  for byte in (0xC0 | code >> 6, 0x80 | code & 0x3F))
    assert [envelope.subject for _, envelope in recorder.messages] == ["lumberjack"] * len(events)
    assert "bad input" not in gateway.output()


def test_the_npm_lumberjack_sender_reports_the_connection_the_gateway_closes(backbone, gateway_factory,
                                                                             recorder_factory, certificates, tmp_path):
    # An event whose "1D" frame exceeds what one backbone message carries is refused from the frame's header:
    # the gateway closes that connection, and the client's 'disconnect' event reports it; nothing of the
    # refused event is published or acked, everything before it is, and the gateway serves the next writer.
    gateway = gateway_factory(backbone, "--tls-cert", certificates["server.pem"], "--tls-key",
                              certificates["server.key"])
    recorder = recorder_factory(backbone)
    before = [{"line": f"before {n}", "host": "npm-sender"} for n in range(1, 4)]
    refused = {"line": "x" * 70_000, "host": "npm-sender"}
    output = npm_events(gateway, certificates, "refused", before + [refused], tmp_path)
    assert re.fullmatch(r"acked 3 disconnected (end|ECONNRESET|EPIPE)", output), output
    deadline = time.monotonic() + 10
    while "bad input, connection closed" not in gateway.output() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "data frame exceeds the limit of 65498 bytes" in gateway.output(), gateway.output()
    after = [{"line": "after the refused event", "host": "npm-sender"}]
    assert npm_events(gateway, certificates, "send", after, tmp_path) == "acked 1"
    assert recorder.wait_for(4) == before + after
    assert gateway.alive()


def test_tls_without_client_certificates(backbone, gateway_factory, recorder_factory, certificates):
    gateway = gateway_factory(backbone, "--tls-cert", certificates["server.pem"], "--tls-key",
                              certificates["server.key"])
    recorder = recorder_factory(backbone)
    with beats_client(gateway, ssl_enable=True, ssl_verify=True, ca_certs=certificates["ca.pem"]) as client:
        client.send([{"encrypted": True}])
    assert recorder.wait_for(1) == [{"encrypted": True}]


def test_bad_options_are_one_line_errors(backbone, certificates, tmp_path, capsys):
    from fyrehose.commands.main import main

    def failure(*options: str, listen: str = f"{LOOPBACK}:0") -> str:
        try:
            status = main(["gateway", "lumberjack", "--listen", listen, "--backbone", backbone.address, *options])
        except SystemExit as exit:  # a usage error
            status = exit.code
        assert status != 0
        error = capsys.readouterr().err
        assert len(error.strip().splitlines()) == 1, error
        return error

    assert "go together" in failure("--tls-cert", certificates["server.pem"])
    assert "needs --tls-cert" in failure("--tls-ca", certificates["ca.pem"])
    assert "cannot load TLS certificate" in failure("--tls-cert", certificates["server.pem"],
                                                    "--tls-key", str(tmp_path / "missing.key"))
    assert "bad subject" in failure("--default-subject", "two words")
    assert "must be in (0, 25]" in failure("--publish-timeout", "30")
    assert "is not a positive duration" in failure("--client-inactivity-timeout", "0")
    assert "--client-inactivity-timeout" in failure("--client-inactivity-timeout", "soon")
    with socket.socket() as taken:
        taken.bind((LOOPBACK, 0))
        taken.listen()
        assert "in use" in failure(listen=f"{LOOPBACK}:{taken.getsockname()[1]}")


def test_sigterm_stops_the_gateway_cleanly(backbone, gateway_factory):
    gateway = gateway_factory(backbone)
    with beats_client(gateway) as client:
        client.send([{"before": "stop"}])
    assert gateway.stop() == 0
    assert "stopped: " in gateway.output() and "events published 1" in gateway.output()
