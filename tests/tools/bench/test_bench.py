"""``fyrehose bench``: the pure parts exhaustively, then short real runs against real servers on loopback."""
from __future__ import annotations

import array
import dataclasses
import json
import shutil
import signal
import struct
import subprocess
import time

import psutil
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fyrehose.protocol import codec
from fyrehose.tools.bench import report, scaling, stats, wire
from fyrehose.tools.bench.offer_schedule import OfferSchedule
from fyrehose.tools.bench.orchestra import BenchSettings, RoundResult, StepRunner
from fyrehose.tools.bench.scanning import (
    MAX_TRACKED_SEQUENCE,
    DeliverScanner,
    NatsStream,
    RespStream,
    StreamError,
    parse_resp,
)
from fyrehose.tools.bench.search import LOSS_LIMIT, RateSearch, StepOutcome
from fyrehose.tools.bench.servers import PACKAGES
from fyrehose.tools.bench.targets import NATS, REDIS, TARGETS, BenchError, parse_targets

from support import FYREHOSE, run_cli

PAYLOAD = 64
stamps = st.integers(min_value=0, max_value=(1 << 64) - 1)
sampled = st.one_of(st.none(), stamps)  # None: a message without a sample mark


def _payload(stamp: int | None, size: int = PAYLOAD) -> bytes:
    if stamp is None:
        return b"x" * size
    return b"@" + struct.pack(">Q", stamp) + b"x" * (size - 9)


def _chunks(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({cut % (len(data) + 1) for cut in cuts}) if data else []
    pieces, last = [], 0
    for point in points + [len(data)]:
        pieces.append(data[last:point])
        last = point
    return pieces


# ---------------------------------------------------------------- wire


def test_push_batch_is_packed_push_frames_with_the_first_one_stamped():
    batch = wire.push_batch(PAYLOAD, 5)
    frames = codec.decode(bytes(batch.stamped(3, 123456789)))
    assert [type(frame) for frame in frames] == [codec.Push] * 3
    assert all(frame.tag == 0 and len(frame.data) == PAYLOAD for frame in frames)
    assert frames[0].data[:9] == b"@" + struct.pack(">Q", 123456789)
    assert frames[1].data == frames[2].data == b"x" * PAYLOAD


def test_resp_publish_batch_is_pipelined_publish_commands():
    batch = wire.resp_publish_batch(PAYLOAD, 4)
    data = bytes(batch.stamped(2, 42))
    first, end = parse_resp(data)
    second, end = parse_resp(data, end)
    assert end == len(data)
    assert first[:2] == second[:2] == [b"PUBLISH", wire.CHANNEL]
    assert first[2] == _payload(42) and second[2] == _payload(None)


def test_nats_pub_batch_is_pipelined_pub_operations():
    data = bytes(wire.nats_pub_batch(16, 2).stamped(2, 7))
    assert data == (b"PUB fyrehose-bench 16\r\n" + _payload(7, 16) + b"\r\n"
                    + b"PUB fyrehose-bench 16\r\n" + b"x" * 16 + b"\r\n")


def test_payloads_too_small_for_a_stamp_are_refused():
    with pytest.raises(ValueError, match="at least 9"):
        wire.push_batch(8, 1)


def test_every_target_sends_the_same_number_of_messages_per_send():
    assert wire.messages_per_send(64) == codec.MAX_DATAGRAM // 73
    assert wire.messages_per_send(codec.MAX_PAYLOAD) == 1


# ---------------------------------------------------------------- scanning


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 10**6), st.lists(sampled, min_size=1, max_size=40))
def test_deliver_scanner_counts_a_packed_run_once(first, stamps_):
    datagram = b"".join(codec.encode_deliver(first + n, _payload(stamp)) for n, stamp in enumerate(stamps_))
    scanner = DeliverScanner(PAYLOAD)
    assert scanner.scan(datagram) == (len(stamps_), [stamp for stamp in stamps_ if stamp is not None])
    assert scanner.scan(datagram)[0] == 0  # the same frames again are duplicates, not deliveries
    assert scanner.duplicates == len(stamps_) and scanner.malformed == 0


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(st.tuples(st.integers(1, 3000), sampled, st.sampled_from([PAYLOAD, 0, 5, 9, 100])),
                         min_size=1, max_size=12), min_size=1, max_size=8),
       st.binary(max_size=12))
def test_deliver_scanner_counts_each_sequence_once_whatever_the_datagrams_hold(datagrams, tail):
    scanner = DeliverScanner(PAYLOAD)
    fresh, found, expected = 0, [], []
    for frames in datagrams:
        datagram = b"".join(codec.encode_deliver(seq, _payload(stamp, size) if size >= 9 else b"x" * size)
                            for seq, stamp, size in frames)
        got, stamps_ = scanner.scan(datagram)
        fresh += got
        found += stamps_
        expected += [stamp for _, stamp, size in frames if stamp is not None and size >= 9]
    frames = [frame for datagram in datagrams for frame in datagram]
    assert found == expected
    assert fresh == len({seq for seq, _, _ in frames})
    assert scanner.duplicates == len(frames) - fresh
    spans, error = codec.scan(tail, codec.DELIVER) if tail else ([], "empty")
    scanner.scan(tail)
    assert scanner.malformed == (tail[:1] == b"\x01" and error is not None)


def test_deliver_scanner_leaves_sequence_zero_and_huge_numbers_uncounted():
    scanner = DeliverScanner(PAYLOAD)
    zero = bytes((codec.DELIVER,)) + PAYLOAD.to_bytes(2, "big") + bytes(6) + _payload(None)
    huge = codec.encode_deliver(MAX_TRACKED_SEQUENCE, _payload(None))
    assert scanner.scan(zero + huge) == (0, []) and scanner.untracked == 2


def test_deliver_scanner_ignores_other_datagrams():
    scanner = DeliverScanner(PAYLOAD)
    assert scanner.scan(bytes((codec.KEEPALIVE_ACK,)) + bytes(16)) == (0, [])
    assert scanner.scan(b"") == (0, [])
    assert scanner.other == 2


resp_items = st.one_of(
    sampled.map(lambda stamp: ("message", stamp)),
    st.just(("subscribe", None)),
)


def _resp_bytes(item) -> bytes:
    kind, stamp = item
    if kind == "message":
        return wire.resp_command(b"message", wire.CHANNEL, _payload(stamp))
    return b"*3\r\n$9\r\nsubscribe\r\n$14\r\nfyrehose-bench\r\n:1\r\n"


@settings(max_examples=150, deadline=None)
@given(st.lists(resp_items, max_size=60), st.lists(st.integers(0, 10_000), max_size=12))
def test_resp_stream_counts_messages_in_any_chunking(items, cuts):
    stream = RespStream(PAYLOAD)
    count, found = 0, []
    for piece in _chunks(b"".join(map(_resp_bytes, items)), cuts):
        got, stamps_ = stream.feed(piece)
        count += got
        found += stamps_
    messages = [stamp for kind, stamp in items if kind == "message"]
    assert count == len(messages)
    assert found == [stamp for stamp in messages if stamp is not None]
    assert stream.subscribed == sum(kind == "subscribe" for kind, _ in items)


@pytest.mark.parametrize("data", [b"-ERR unknown command\r\n", b"?what\r\n", b"*1\r\n:5\r\n", b"$3\r\nabcXY"])
def test_resp_stream_rejects_errors_and_garbage(data):
    with pytest.raises(StreamError):
        RespStream(PAYLOAD).feed(data)


@given(st.recursive(st.one_of(st.binary(max_size=20), st.integers(-1000, 1000)), st.lists, max_leaves=12))
def test_parse_resp_reads_a_value_only_once_complete(value):
    def encode(item) -> bytes:
        if isinstance(item, list):
            return b"*%d\r\n" % len(item) + b"".join(map(encode, item))
        if isinstance(item, int):
            return b":%d\r\n" % item
        return b"$%d\r\n%s\r\n" % (len(item), item)

    data = encode(value)
    for cut in range(len(data)):
        assert parse_resp(data[:cut]) is None
    assert parse_resp(data + b"+next\r\n") == (value, len(data))


nats_items = st.one_of(
    sampled.map(lambda stamp: ("MSG", stamp)),
    sampled.map(lambda stamp: ("MSG-REPLY", stamp)),
    st.sampled_from([("PING", None), ("PONG", None), ("+OK", None), ("INFO", None)]),
)


def _nats_bytes(item) -> bytes:
    kind, stamp = item
    if kind == "MSG":
        return wire.nats_message_head(PAYLOAD) + _payload(stamp) + b"\r\n"
    if kind == "MSG-REPLY":
        return b"MSG fyrehose-bench 1 _INBOX.x %d\r\n" % PAYLOAD + _payload(stamp) + b"\r\n"
    if kind == "INFO":
        return b'INFO {"server_id":"x","max_payload":1048576}\r\n'
    return kind.encode() + b"\r\n"


@settings(max_examples=150, deadline=None)
@given(st.lists(nats_items, max_size=60), st.lists(st.integers(0, 10_000), max_size=12))
def test_nats_stream_counts_messages_and_pings_in_any_chunking(items, cuts):
    stream = NatsStream(PAYLOAD)
    count, found = 0, []
    for piece in _chunks(b"".join(map(_nats_bytes, items)), cuts):
        got, stamps_ = stream.feed(piece)
        count += got
        found += stamps_
    messages = [stamp for kind, stamp in items if kind.startswith("MSG")]
    assert count == len(messages)
    assert found == [stamp for stamp in messages if stamp is not None]
    assert stream.pings == sum(kind == "PING" for kind, _ in items)
    assert stream.pongs == sum(kind == "PONG" for kind, _ in items)


@pytest.mark.parametrize("data", [b"-ERR 'Slow Consumer Detected'\r\n", b"HELLO\r\n", b"MSG a b\r\n",
                                  b"MSG a 1 3\r\nabcXY"])
def test_nats_stream_rejects_errors_and_garbage(data):
    with pytest.raises(StreamError):
        NatsStream(PAYLOAD).feed(data)


def test_a_line_without_end_is_refused_once_too_long():
    stream = NatsStream(PAYLOAD)
    assert stream.feed(b"INFO " + b"x" * 1000) == (0, [])  # may still end
    with pytest.raises(StreamError, match="no line end"):
        stream.feed(b"x" * 70_000)


# ---------------------------------------------------------------- pacing


@settings(max_examples=150, deadline=None)
@given(st.floats(10, 5e6), st.integers(1, 1000), st.lists(st.floats(0, 0.01), min_size=1, max_size=300))
def test_offer_schedule_never_runs_ahead_and_sends_at_most_a_batch(rate, batch, gaps):
    schedule = OfferSchedule(rate, start=100.0, batch=batch)
    now = 100.0
    for gap in gaps:
        now += gap
        count = schedule.due(now)
        assert 0 <= count <= batch
        if count:
            schedule.record(count, now)
        assert schedule.sent <= int((now - 100.0) * rate)


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 1000), st.floats(0.1, 3000))
def test_a_publisher_that_waits_as_told_offers_the_rate(batch, full_batches_per_second):
    rate = max(100.0, batch * full_batches_per_second)
    schedule = OfferSchedule(rate, start=0.0, batch=batch)
    now, sends = 0.0, 0
    while now < 1.0:
        count = schedule.due(now)
        if count:
            schedule.record(count, now)
            sends += 1
        else:
            wait = schedule.wait(now)
            assert wait > 0
            now += wait
    assert schedule.sent >= int(rate) - batch - rate * 0.001 - 2  # at most a batch and a tick's worth still due
    assert sends <= 1000 + rate / batch + 2  # one send per 1 ms tick, or full batches


def test_offer_schedule_unthrottled_always_sends_a_full_batch():
    schedule = OfferSchedule(None, start=0.0, batch=50)
    assert schedule.due(0.0) == 50 and schedule.wait(0.0) == 0


# ---------------------------------------------------------------- search


def _outcome(rate: float | None, capacity: float, ceiling: float) -> StepOutcome:
    """A target that delivers up to ``capacity`` msgs/s and publishers that offer up to ``ceiling``."""
    offered = ceiling if rate is None else min(rate, ceiling)
    delivered = min(offered, capacity)
    return StepOutcome(rate, offered, delivered, 1 - delivered / offered)


@settings(max_examples=150, deadline=None)
@given(st.floats(1e3, 1e7), st.floats(1.01, 100), st.integers(0, 8))
def test_search_finds_a_sustained_rate_near_capacity(capacity, overload, steps):
    search = RateSearch(steps)
    fixed_steps = 0
    while not search.done:
        fixed_steps += search.rate is not None
        search.record(_outcome(search.rate, capacity, capacity * overload))
    assert fixed_steps == steps
    best = search.best()
    if steps == 0:
        assert best is search.probe and not best.sustained
        return
    assert best.sustained and best.rate <= capacity  # the probe's delivered rate is itself sustainable here
    assert search.first_overload() is search.probe or search.first_overload().rate > capacity


def test_search_stops_at_once_when_nothing_is_lost_unthrottled():
    search = RateSearch(4)
    search.record(_outcome(None, capacity=1e6, ceiling=5e5))  # the publisher is the bottleneck
    assert search.done and search.best().sustained and search.best().rate is None


def test_search_walks_down_when_the_saturation_estimate_fails_and_reports_failure_if_nothing_passes():
    search = RateSearch(2)
    search.record(StepOutcome(None, 1e6, 5e5, 0.5))
    assert search.rate == 5e5
    search.record(StepOutcome(5e5, 5e5, 4e5, 0.2))
    assert search.rate == pytest.approx(3e5)
    search.record(StepOutcome(3e5, 3e5, 2.9e5, 0.03))
    assert search.done and not search.best().sustained and search.best().rate == 3e5
    assert search.first_overload().rate == 3e5


def test_sustained_needs_low_loss_and_the_rate_really_offered():
    assert StepOutcome(1000, 990, 990, 0).sustained
    assert not StepOutcome(1000, 900, 900, 0).sustained
    assert not StepOutcome(1000, 1000, 999, LOSS_LIMIT).sustained


# ---------------------------------------------------------------- stats and report


def _step_runner(tmp_path, duration: float) -> StepRunner:
    settings = BenchSettings(targets=parse_targets("fyrehose"), publishers=1, subscribers=2, payload=64,
                             duration=duration, rate=1000.0, latency_rate=1000.0, rounds=1, search_steps=0,
                             grace=0.25, workers=1, fanout=None)
    return StepRunner(settings, {}, tmp_path)


def test_a_steps_figures_are_counts_over_the_publishing_window(tmp_path):
    received = [{"received": 1990, "latencies": array.array("q", [1_000_000, 3_000_000]).tobytes(),
                 "anomalies": {"duplicates": 2}},
                {"received": 2000, "latencies": array.array("q", [2_000_000]).tobytes(),
                 "anomalies": {"duplicates": 1, "out of order": 4}}]
    step = _step_runner(tmp_path, 2.0)._result(1000.0, 2000, received, {"server": 50.0}, 60.0)
    # offered: sent / duration; delivered: the subscribers' mean count / duration; loss: the worst subscriber's
    assert step.outcome == StepOutcome(rate=1000.0, offered=1000.0, delivered=997.5, loss=pytest.approx(0.005))
    assert list(step.latencies_ns) == [1_000_000, 3_000_000, 2_000_000]
    assert step.anomalies == {"duplicates": 3, "out of order": 4}
    assert (step.cpu, step.machine_busy) == ({"server": 50.0}, 60.0)
    with pytest.raises(BenchError, match="the publishers sent nothing"):
        _step_runner(tmp_path, 2.0)._result(1000.0, 0, received, {}, 0.0)


def test_a_subscriber_that_got_more_than_was_sent_is_no_negative_loss(tmp_path):
    received = [{"received": 110, "latencies": b"", "anomalies": {}}]
    step = _step_runner(tmp_path, 1.0)._result(None, 100, received, {}, 0.0)
    assert (step.outcome.offered, step.outcome.delivered, step.outcome.loss) == (100.0, 110.0, 0.0)


def test_latency_percentiles_in_milliseconds():
    p50, p99, p999 = stats.latency_ms([n * 1000 for n in range(1, 100_001)])  # 1 us .. 100 ms
    assert p50 == pytest.approx(50.0, rel=1e-3)
    assert p99 == pytest.approx(99.0, rel=1e-3)
    assert p999 == pytest.approx(99.9, rel=1e-3)
    assert stats.latency_ms([5]) == (None, None, None)


@pytest.mark.parametrize("cpu, busy, expected", [
    ({"server": 97.0, "publisher-1": 40.0}, 70.0, "server"),
    ({"server": 50.0, "subscriber-3": 95.0}, 99.0, "subscriber"),
    ({"server": 60.0, "server-child-2": 92.0}, 95.0, "server-child"),
    ({"server": 0.0, "server/fh-fanout-2": 91.0}, 95.0, "server/fh-fanout"),
    ({"server": 70.0, "subscriber-1": 50.0}, 93.0, "machine"),
    ({"server": 30.0}, 40.0, "none"),
])
def test_saturated_process(cpu, busy, expected):
    assert stats.saturated_process(cpu, busy) == expected


def _round(target: str, delivered: float, saturated: str = "server") -> RoundResult:
    return RoundResult(target=target, rate=delivered, offered=delivered, delivered=delivered, loss=0.0,
                       sustained=True, latency_rate=10_000.0, latency_loss=0.0, p50_ms=0.1, p99_ms=0.5,
                       p999_ms=1.0, saturated=saturated, cpu={"server": 90.0, "publisher-1": 5.0},
                       machine_busy=80.0, overload_cpu={}, steps=[])


def test_report_takes_medians_and_ratios_within_rounds():
    rounds = {
        "fyrehose": [_round("fyrehose", 300.0), _round("fyrehose", 100.0), _round("fyrehose", 500.0, "machine")],
        "fyrehose-single": [_round("fyrehose-single", 100.0), _round("fyrehose-single", 100.0),
                            _round("fyrehose-single", 1000.0)],
    }
    bench = BenchSettings(targets=parse_targets("fyrehose,fyrehose-single"), publishers=1, subscribers=4,
                          payload=64, duration=10.0, rate=None, latency_rate=10_000.0, rounds=3, search_steps=4,
                          grace=0.25, workers=1, fanout=None)
    doc = report.document(bench, {"cores": 2, "cpu_model": "test"}, rounds)
    first = doc["results"][0]
    assert first["target"] == "fyrehose" and first["delivered_per_sub_per_s"] == 300.0
    assert first["saturated"] == "server"
    assert doc["ratios"] == {"fyrehose/fyrehose-single": 1.0}  # per round: 3.0, 1.0, 0.5
    json.dumps(doc, allow_nan=False)


def test_a_ratio_is_the_targets_delivered_rate_over_its_baselines():
    rounds = {"fyrehose": [_round("fyrehose", 300.0), _round("fyrehose", 50.0)],
              "fyrehose-single": [_round("fyrehose-single", 100.0), _round("fyrehose-single", 0.0)]}
    assert report.ratios(rounds) == {"fyrehose/fyrehose-single": 3.0}  # a round whose baseline got nothing is left out


def test_a_targets_summary_takes_each_figure_from_its_own_field():
    (measured,) = rounds = [dataclasses.replace(_round("fyrehose", 100.0), offered=120.0, loss=0.01)]
    summary = report.summarise("fyrehose", rounds)
    assert (summary["delivered_per_sub_per_s"], summary["offered_per_s"], summary["loss_before_recovery"]) == (
        100.0, 120.0, 0.01)
    assert (summary["p50_ms"], summary["p99_ms"], summary["p999_ms"]) == (0.1, 0.5, 1.0)
    assert summary["rounds"] == [dataclasses.asdict(measured)]


def test_target_names():
    assert [target.name for target in parse_targets("redis, nats")] == ["redis", "nats"]
    assert not TARGETS["fyrehose-single-nobatch"].batch and not TARGETS["fyrehose-single"].multiprocess
    for bad in ("", "redis,redis", "kafka"):
        with pytest.raises(ValueError):
            parse_targets(bad)


# ---------------------------------------------------------------- the command, for real

RESULT_KEYS = {"target", "delivered_per_sub_per_s", "loss_before_recovery", "p50_ms", "p99_ms", "p999_ms",
               "saturated"}


def _installed(protocol: str) -> bool:
    binary = PACKAGES[protocol][0]
    return bool(shutil.which(binary, path="/usr/sbin:/usr/bin:/sbin:/usr/local/bin"))


def _check_result(result: dict, rate: float) -> None:
    """What one target's result holds; its figures are the command's output, not asserted here (their arithmetic
    is, on given samples, above)."""
    assert RESULT_KEYS <= set(result)
    assert isinstance(result["saturated"], str) and result["saturated"]
    (measured,) = result["rounds"]
    assert measured["rate"] == rate and measured["sustained"] == (result["sustained_rounds"] == 1)
    assert result["delivered_per_sub_per_s"] == measured["delivered"] > 0  # something arrived
    assert 0.0 <= result["loss_before_recovery"] <= 1.0
    assert 0 < result["p50_ms"] <= result["p99_ms"] <= result["p999_ms"]
    assert all(isinstance(result[key], float) for key in RESULT_KEYS - {"target", "saturated"})
    server = sum(share for name, share in result["cpu_percent"].items() if name.startswith("server"))
    assert server > 0 and result["cpu_percent"]["publisher-1"] > 0


def test_fixed_rate_run_against_every_installed_server(tmp_path):
    targets = ["fyrehose", "fyrehose-single", "fyrehose-single-nobatch"] + [
        name for name, protocol in (("redis", REDIS), ("nats", NATS)) if _installed(protocol)]
    out = tmp_path / "bench.json"
    done = run_cli("bench", "--targets", ",".join(targets), "--subscribers", "2", "--payload", "64",
                   "--duration", "1", "--rate", "2000", "--rounds", "1", "--json", str(out), timeout=120)
    assert done.returncode == 0, done.stderr.decode()
    doc = json.loads(out.read_text())
    assert doc["machine"]["cores"] >= 1
    assert [result["target"] for result in doc["results"]] == targets
    for result in doc["results"]:
        _check_result(result, 2000)
        assert result["cpu_percent"].keys() >= {"subscriber-1", "subscriber-2"}
    fyrehose, single = doc["results"][0], doc["results"][1]
    assert doc["ratios"]["fyrehose/fyrehose-single"] == pytest.approx(  # one round: the ratio of its two figures
        fyrehose["delivered_per_sub_per_s"] / single["delivered_per_sub_per_s"], rel=1e-12)
    assert any(name.startswith("server/") for name in doc["results"][0]["cpu_percent"])  # the backbone's workers
    costs = doc["scaling"]["stage_costs_us"]
    assert all(cost > 0 for cost in costs.values()) and doc["scaling"]["measured"]["subscribers"] == 2
    assert len(doc["scaling"]["projections"]) == 2 * len(scaling.CORES) * len(scaling.SUBSCRIBERS)
    table = done.stdout.decode()
    assert all(target in table for target in targets) and "p99.9 ms" in table


def test_max_mode_searches_then_measures_latency_at_the_fixed_rate(tmp_path):
    out = tmp_path / "bench.json"
    done = run_cli("bench", "--targets", "fyrehose-single", "--subscribers", "1", "--duration", "1.5",
                   "--search-steps", "1", "--latency-rate", "2000", "--rounds", "1", "--json", str(out), timeout=120)
    assert done.returncode == 0, done.stderr.decode()
    result = json.loads(out.read_text())["results"][0]
    steps = result["rounds"][0]["steps"]
    # unthrottled first; one fixed-rate step unless that delivered nothing to estimate from; latency last
    assert steps[0]["rate"] is None and steps[-1]["rate"] == 2000 and result["latency_rate"] == 2000
    assert len(steps) == (3 if steps[0]["delivered_per_sub_per_s"] else 2)
    assert result["rounds"][0]["rate"] in [step["rate"] for step in steps[:-1]]
    assert 0 < result["p50_ms"] <= result["p999_ms"]
    assert result["saturated"] in ("server", "publisher", "subscriber", "machine", "none")


def test_sigterm_stops_every_server_and_load_generator(tmp_path):
    bench = subprocess.Popen(FYREHOSE + ["bench", "--targets", "fyrehose-single", "--subscribers", "2",
                                         "--rate", "1000", "--duration", "60", "--rounds", "1"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    children: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + 30
        while len(children) < 4 and time.monotonic() < deadline:  # the backbone, 2 subscribers, 1 publisher
            time.sleep(0.2)
            children = psutil.Process(bench.pid).children(recursive=True)
        assert len(children) >= 4, "the step never started"
        bench.send_signal(signal.SIGTERM)
        assert bench.wait(30) == 128 + signal.SIGTERM
        _, alive = psutil.wait_procs(children, timeout=5)
        assert not alive
    finally:
        for child in children:
            if child.is_running():
                child.kill()  # only when the bench failed to stop them itself
        if bench.poll() is None:
            bench.kill()
            bench.wait(10)


@pytest.mark.parametrize("args, message", [
    (["--targets", "kafka"], "unknown target"),
    (["--payload", "8"], "outside 9..65498"),
    (["--rate", "0"], "is not a positive number"),
    (["--subscribers", "x"], "is not an integer"),
])
def test_bad_arguments_get_one_line_and_exit_2(args, message):
    done = run_cli("bench", *args)
    lines = done.stderr.decode().strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and message in lines[0]


def test_an_unwritable_json_path_fails_before_measuring(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    done = run_cli("bench", "--targets", "fyrehose-single", "--json", str(blocker / "out.json"))
    lines = done.stderr.decode().strip().splitlines()
    assert done.returncode == 1 and len(lines) == 1 and lines[0].startswith("fyrehose bench: error:")


def test_client_mode_drives_each_python_client_end_to_end(tmp_path):
    targets = ["fyrehose", "fyrehose-single"] + [name for name, protocol in (
        ("redis", REDIS), ("nats", NATS), ("nats-callback", NATS)) if _installed(protocol)]
    out = tmp_path / "client.json"
    done = run_cli("bench", "client", "--targets", ",".join(targets), "--messages", "20000", "--batch", "500",
                   "--rounds", "1", "--json", str(out), timeout=300)
    assert done.returncode == 0, done.stderr.decode()
    doc = json.loads(out.read_text())
    assert doc["settings"]["messages"] == 20000 and doc["settings"]["batch"] == 500
    assert [result["target"] for result in doc["results"]] == targets
    for result in doc["results"]:
        (measured,) = result["rounds"]
        assert measured["received"] + measured["lost"] == 20000 and result["lost"] == 0  # loopback, no overload
        assert result["msgs_per_s"] > 0 and result["publish_per_s"] > 0
        assert result["publish_cpu_us"] > 0 and result["iterate_cpu_us"] > 0
        assert result["server_cpu_us"] >= 0  # the kernel counts a server's CPU in 10 ms ticks: 20,000 messages may be 0
        low, middle, high = result["msgs_per_s_spread"]
        assert low <= middle <= high and middle == result["msgs_per_s"]
        fyrehose = result["target"].startswith("fyrehose")
        assert (result["requests"] is not None) == fyrehose and (measured["holes"] is not None) == fyrehose
        assert (result["recovery_p50_ms"] is None) == (not result["holes"])
    assert "fyrehose/fyrehose-single" not in doc["ratios"]
    for pair, (low, middle, high) in doc["ratio_spreads"].items():
        assert low <= middle <= high and doc["ratios"][pair] == middle
    if _installed(NATS):
        assert doc["ratios"]["fyrehose-single/nats"] > 0 and doc["ratios"]["fyrehose/nats-callback"] > 0
    table = done.stdout.decode()
    assert all(target in table for target in targets) and "iterate us/msg" in table and "recovery p50/p99 ms" in table


@pytest.mark.parametrize("args, message", [
    (["client", "--targets", "fyrehose-nobatch"], "has no client mode"),
    (["--targets", "nats-callback"], "unknown target"),
])
def test_a_target_of_the_other_mode_gets_one_line_and_exit_1(args, message):
    done = run_cli("bench", *args)
    lines = done.stderr.decode().strip().splitlines()
    assert done.returncode == 1 and len(lines) == 1 and message in lines[0]


# ---------------------------------------------------------------- scaling on paper


PIPELINE_CPU = {"server": 3.0, "server/fh-receiver-0": 20.0, "server/fh-sequencer": 30.0, "server/fh-fanout-0": 40.0,
                "publisher-1": 90.0}


def test_stage_costs_are_each_stage_cpu_per_message_and_fan_out_per_copy():
    costs = scaling.stage_costs(PIPELINE_CPU, 100_000.0, 4)
    assert costs == scaling.StageCosts(pytest.approx(2.0), pytest.approx(3.0), pytest.approx(1.0))
    assert scaling.stage_costs({"server": 50.0}, 100_000.0, 4) is None  # one process: no stages to tell apart
    assert scaling.stage_costs(PIPELINE_CPU, 0.0, 4) is None


def test_the_projection_splits_the_cores_for_the_slowest_stage_and_shows_auto_beside_it():
    costs = scaling.StageCosts(receive_us=2.0, sequence_us=3.0, fanout_us=1.0)
    best, auto = scaling.project(costs, cores=8, subscribers=4)
    # 7 spare cores: R receive at 2 us, 7 - R fan-out at 4 us per message (4 copies), sequencer 333k/s
    assert (best.receive_workers, best.fanout_workers, best.bottleneck) == (2, 5, "sequence")
    assert best.msgs_per_s == pytest.approx(1e6 / 3)
    assert (auto.receive_workers, auto.fanout_workers) == (2, 5) and auto.layout == "auto"
    wide, _ = scaling.project(costs, cores=8, subscribers=256)
    assert wide.bottleneck == "fanout" and wide.fanout_workers == 6
    assert wide.msgs_per_s == pytest.approx(6 * 1e6 / 256)
    with pytest.raises(ValueError):
        scaling.project(costs, cores=2, subscribers=4)


def test_the_record_takes_each_stage_median_over_rounds_and_is_absent_without_the_pipeline():
    rounds = [(PIPELINE_CPU, 100_000.0), ({k: v * 2 for k, v in PIPELINE_CPU.items()}, 100_000.0),
              (PIPELINE_CPU, 50_000.0)]
    record = scaling.scaling_record(rounds, 4, 2)
    assert record["stage_costs_us"] == {"receive_us": pytest.approx(4.0), "sequence_us": pytest.approx(6.0),
                                        "fanout_us": pytest.approx(2.0)}
    assert record["measured"]["cpu_bound_ceiling_per_s"] == pytest.approx(2e6 / 18)
    assert scaling.scaling_record([({"server": 50.0}, 1000.0)], 4, 2) is None
