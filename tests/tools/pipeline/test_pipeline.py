"""The Spark jobs against a real local Spark session (one for the whole test session, local[2]).

Journals come from the pipeline's own generator with gaps and duplicates
known by construction; expected values are recomputed here from the files
with pyarrow and the project's own decoders, never taken from the job.
"""
from __future__ import annotations

import base64
import json
import math
import struct
from datetime import UTC, datetime, timedelta
from pathlib import Path

import matplotlib.image
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fyrehose.commands import main as cli
from fyrehose.loadtest.stamp import published_ns
from fyrehose.subjects import envelope
from fyrehose.subjects import patterns as subjects
from fyrehose.tools.pipeline.capacity import CapacityOptions, run_capacity
from fyrehose.tools.pipeline.completeness import missing_ranges, sequence_copies
from fyrehose.tools.pipeline.export import ExportOptions, run_export
from fyrehose.tools.pipeline.generate import JournalSpec, generate
from fyrehose.tools.pipeline.journal import read_journal
from fyrehose.tools.pipeline.publish_time import MAX_PUBLISHED_US, with_published_us
from fyrehose.tools.pipeline.spark import spark_session
from fyrehose.tools.pipeline.subject_regex import pattern_regex
from fyrehose.tools.pipeline.timerange import TimeRange

from support import EVENT_WITHIN

START = datetime(2024, 5, 1, 22, 30, tzinfo=UTC)  # the journal crosses midnight: two dates, five hours
MISSING = ((10, 12), (999, 1001), (1999, 1999), (2990, 4010), (5000, 5001))  # bucket edges at multiples of 1000
DUPLICATES = (5, 998, 7000)
SPARK_CHECKS = settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                             HealthCheck.function_scoped_fixture])


# Small data, many short queries: compiling each query to Java (whole-stage codegen) and the JIT's optimising
# tier cost more than they save here.  Results are the same either way.
TEST_CONF = {"spark.sql.shuffle.partitions": "4", "spark.sql.codegen.wholeStage": "false",
             "spark.sql.adaptive.enabled": "false", "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1"}


@pytest.fixture(scope="session")
def spark():
    with spark_session("local[2]", "fyrehose pipeline tests", TEST_CONF) as session:
        yield session


@pytest.fixture(scope="module")
def journal(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("journal")
    generate(JournalSpec(messages=6000, start=START, rate=0.5, subjects=5, raw_share=0.2, missing=MISSING,
                         duplicates=DUPLICATES, unrecorded=((1999, 1999),), segment_messages=1000, seed=3), path)
    return path


def _source_rows(journal: Path) -> list[dict]:
    rows = []
    for path in sorted((journal / "parquet").rglob("*.parquet")):
        rows += pq.read_table(path).to_pylist()
    return sorted(rows, key=lambda row: row["seq"])


def _latency_ms(row: dict) -> float:
    """Publish to journal: the payload's t_ns to the row's received_at (whole microseconds, as the pipeline)."""
    received_us = round(row["received_at"].timestamp() * 1e6)
    decoded = envelope.decode(row["payload"])
    published_us = json.loads(decoded.data if decoded else row["payload"])["t_ns"] // 1000
    return (received_us - published_us) / 1000.0


def _is_median_sample(latencies: list[float], value: float) -> bool:
    """Whether ``value`` is the sample at the middle rank of ``latencies`` (ties share a rank span)."""
    rank = math.ceil(len(latencies) / 2)
    return sum(latency < value for latency in latencies) < rank <= sum(latency <= value for latency in latencies)


def _assert_png(path: Path) -> None:
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    height, width, _ = matplotlib.image.imread(path).shape  # decodes the whole image
    assert height > 100 and width > 100


def test_report_finds_exactly_the_missing_ranges_and_duplicates(spark, journal, tmp_path, capfd):
    out = tmp_path / "report"
    # the command line, in this process so that it runs in the test session's Spark
    assert cli.main(["pipeline", "report", "--journal", str(journal), "--out", str(out), "--bucket-size", "1000",
                     "--window", "600", "--from", "2024-05-01T22:00Z", "--to", "2024-05-02T03:00Z"]) == 0
    assert f"report: {out / 'report.html'}" in capfd.readouterr().out

    gaps = pq.read_table(out / "gaps.parquet").to_pylist()
    assert [(gap["from_seq"], gap["to_seq"]) for gap in gaps] == list(MISSING)
    assert all(gap["missing"] == gap["to_seq"] - gap["from_seq"] + 1 for gap in gaps)
    assert all(gap["seen_before"] < gap["seen_after"] for gap in gaps)
    duplicates = pq.read_table(out / "duplicates.parquet").to_pylist()
    assert [(row["seq"], row["copies"]) for row in duplicates] == [(seq, 2) for seq in DUPLICATES]

    written = json.loads((out / "summary.json").read_text())
    missing = sum(high - low + 1 for low, high in MISSING)
    assert (written["messages"], written["first_seq"], written["last_seq"]) == (6003, 1, 6000 + missing)
    assert (written["missing"], written["gap_ranges"], written["duplicates"], written["duplicate_seqs"]) == (
        missing, len(MISSING), 3, 3)
    assert written["journal_recorded_gaps"] == {"ranges": 4, "missing": missing - 1, "confirmed_missing": missing - 1,
                                                "missing_not_recorded": 1}

    source = _source_rows(journal)
    by_subject: dict[str | None, int] = {}
    for row in source:
        by_subject[row["subject"]] = by_subject.get(row["subject"], 0) + 1
    subjects_table = pq.read_table(out / "subjects.parquet").to_pylist()
    assert {row["subject"]: row["messages"] for row in subjects_table} == by_subject
    windows = pq.read_table(out / "windows.parquet").to_pylist()
    assert sum(window["messages"] for window in windows) == 6003
    last_received = max(row["received_at"] for row in source)
    assert [window["window_start"] for window in windows] == [  # every ten minutes from the first to the last
        START + timedelta(minutes=10 * i) for i in range(int((last_received - START) / timedelta(minutes=10)) + 1)]
    empty = [window["window_start"] for window in windows if window["messages"] == 0]
    assert empty == [datetime(2024, 5, 2, 0, minute, tzinfo=UTC) for minute in (10, 20, 30)]  # seq 2990..4010 lost
    assert (written["from"], written["to"]) == ("2024-05-01T22:00:00+00:00", "2024-05-02T03:00:00+00:00")
    assert written["bytes"] == sum(row["size"] for row in source)
    assert written["top_subjects"][0]["messages"] == max(by_subject.values())
    assert written["latency"]["messages"] == 6003  # every generated payload carries t_ns
    latencies = [_latency_ms(row) for row in source]
    assert _is_median_sample(latencies, written["latency"]["p50_ms"])

    for chart in ("rate.png", "gaps.png", "sizes.png", "latency.png"):
        _assert_png(out / chart)
    html = (out / "report.html").read_text()
    for chart in ("rate.png", "gaps.png", "sizes.png", "latency.png"):
        assert f'src="{chart}"' in html
    assert "2,990" in html and "4,010" in html  # the gap list


def test_gaps_do_not_depend_on_the_bucket_size(spark, journal):
    copies = sequence_copies(read_journal(spark, journal).select("seq", "received_at"))
    results = {size: sorted((row.from_seq, row.to_seq) for row in missing_ranges(copies, size).collect())
               for size in (1, 7, 1 << 20)}
    assert all(found == list(MISSING) for found in results.values()), results


def test_time_range_becomes_a_partition_filter(spark, journal, capsys):
    time_range = TimeRange(datetime(2024, 5, 1, 23, 59, 30, tzinfo=UTC), datetime(2024, 5, 2, 1, 10, tzinfo=UTC))
    frame = read_journal(spark, journal, time_range)
    frame.explain()
    plan = capsys.readouterr().out
    filters = next(line for line in plan.splitlines() if "PartitionFilters" in line)
    assert "date" in filters and "hour" in filters, plan
    expected = [row["seq"] for row in _source_rows(journal)
                if time_range.start <= row["received_at"] < time_range.end]
    assert sorted(row.seq for row in frame.select("seq").collect()) == expected


def test_export_parquet_round_trips_a_subject_and_time_selection(spark, journal, tmp_path):
    time_range = TimeRange(datetime(2024, 5, 1, 23, 0, tzinfo=UTC), datetime(2024, 5, 2, 1, 0, tzinfo=UTC))
    target = run_export(spark, ExportOptions(journal, tmp_path / "x", "parquet", "quotes.>", time_range))
    assert target == tmp_path / "x" / "parquet"
    folders = sorted({path.parent.relative_to(target).as_posix() for path in target.rglob("*.parquet")})
    assert folders == ["date=2024-05-01/hour=23", "date=2024-05-02/hour=00"]
    exported = []
    for path in sorted(target.rglob("*.parquet")):
        exported += pq.read_table(path, columns=["seq", "received_at", "subject", "payload", "size"]).to_pylist()
    expected = [row for row in _source_rows(journal)
                if row["subject"] is not None and subjects.match("quotes.>", row["subject"])
                and time_range.start <= row["received_at"] < time_range.end]
    assert expected and sorted(exported, key=lambda row: row["seq"]) == expected
    # an export is itself a journal the pipeline reads
    assert read_journal(spark, tmp_path / "x").count() == len(expected)


def test_export_jsonl_round_trips_every_message(spark, journal, tmp_path):
    target = run_export(spark, ExportOptions(journal, tmp_path / "x", "jsonl"))
    lines = [json.loads(line) for path in sorted(target.glob("part-*.json")) for line in path.read_text().splitlines()]
    assert [line["seq"] for line in lines] == sorted(line["seq"] for line in lines)  # files and lines in seq order
    decoded = [{"seq": line["seq"], "received_at": datetime.fromisoformat(line["received_at"]),
                "subject": line.get("subject"), "payload": base64.b64decode(line["payload"]), "size": line["size"]}
               for line in lines]
    assert decoded == _source_rows(journal)


# --- the publish-time convention, against the project's own decoders ---------------------------------------------

def _expected_us(payload: bytes | None) -> int | None:
    if payload is None:
        return None
    data = payload
    if payload[:3] == b"\xfb\x1e\x01":
        decoded = envelope.decode(payload)
        if decoded is None:
            return None
        data = decoded.data
    stamp = published_ns(data)
    if stamp is not None:
        return stamp // 1000 if stamp // 1000 < MAX_PUBLISHED_US else None
    if not data.startswith(b"{"):
        return None
    try:
        fields, _ = json.JSONDecoder().raw_decode(data.decode("utf-8", "replace"))
    except ValueError:
        return None
    if not isinstance(fields, dict):
        return None
    t_ns, seconds = fields.get("t_ns"), fields.get("published_at")
    if type(t_ns) is int and 0 <= t_ns < 2**63 and t_ns // 1000 < MAX_PUBLISHED_US:
        return t_ns // 1000
    if type(seconds) in (int, float) and 0 <= seconds < MAX_PUBLISHED_US // 10**6:
        return int(seconds * 1_000_000)
    return None


numbers = st.one_of(st.integers(-2**64, 2**64), st.floats(allow_nan=True, allow_infinity=True),
                    st.integers(1_600_000_000, 1_800_000_000), st.integers(1_600_000_000 * 10**9, 1_800_000_000 * 10**9),
                    st.booleans(), st.text(max_size=5), st.none())
json_data = st.fixed_dictionaries({}, optional={"t_ns": numbers, "published_at": numbers, "x": numbers}).map(
    lambda fields: json.dumps(fields).encode())
stamp_data = st.builds(lambda value, tail: b"FHLT" + struct.pack(">Q", value) + tail,
                       st.integers(0, 2**64 - 1), st.binary(max_size=8))
data = st.one_of(json_data, stamp_data, st.binary(max_size=20), st.just(b"FHLT123"),
                 json_data.map(lambda raw: raw + b" trailing"), json_data.map(lambda raw: raw[:-1]))
tokens = st.text("abcxyz", min_size=1, max_size=3)
subject_names = st.lists(tokens, min_size=1, max_size=3).map(".".join)
envelopes = st.builds(
    lambda subject, body, reply, session, digest: envelope.encode(envelope.Envelope(
        subject, body, reply=reply, session=session, seqno=None if session is None else 7, digest=digest)),
    subject_names, data, st.none() | subject_names, st.none() | st.just("user.NONCE"), st.none() | st.binary(max_size=32))
payloads = st.one_of(data, envelopes, st.tuples(envelopes, st.integers(0, 60)).map(lambda pair: pair[0][:pair[1]]),
                     st.none())


@SPARK_CHECKS
@given(batch=st.lists(payloads, min_size=1, max_size=60))
def test_publish_time_follows_the_documented_convention(spark, batch):
    frame = spark.createDataFrame(list(enumerate(batch)), "id INT, payload BINARY")
    found = {row.id: row.published_us for row in with_published_us(frame).collect()}
    assert found == {index: _expected_us(payload) for index, payload in enumerate(batch)}


patterns = st.lists(st.one_of(tokens, st.just("*")), min_size=1, max_size=3).flatmap(
    lambda parts: st.sampled_from([".".join(parts), ".".join(parts + [">"])]))


@SPARK_CHECKS
@given(pairs=st.lists(st.tuples(patterns, subject_names), min_size=1, max_size=80))
def test_subject_filter_matches_like_the_client(spark, pairs):
    frame = spark.createDataFrame([(pattern_regex(p), s) for p, s in pairs], "regex STRING, subject STRING")
    found = [row.hit for row in frame.selectExpr("subject RLIKE regex AS hit").collect()]
    assert found == [subjects.match(p, s) for p, s in pairs]


# --- capacity: a load test's results joined with the backbone metrics and the journal ----------------------------

HISTORY_HEADER = ("Timestamp,User Count,Type,Name,Requests/s,Failures/s,50%,66%,75%,80%,90%,95%,98%,99%,99.9%,99.99%,"
                  "100%,Total Request Count,Total Failure Count,Total Median Response Time,Total Average Response Time,"
                  "Total Min Response Time,Total Max Response Time,Total Average Content Size")
STATS_HEADER = ("Type,Name,Request Count,Failure Count,Median Response Time,Average Response Time,Min Response Time,"
                "Max Response Time,Average Content Size,Requests/s,Failures/s,50%,66%,75%,80%,90%,95%,98%,99%,99.9%,"
                "99.99%,100%")
T0 = 1_714_600_000  # 2024-05-01T21:46:40Z


def _write_loadtest(directory: Path) -> None:
    """Two 10 s phases at 100 and 200 msgs/s, with metric samples whose counters rise at known rates."""
    directory.mkdir()
    phases = [(T0, T0 + 10, 100.0, 0.25, 0.0), (T0 + 10, T0 + 20, 200.0, 0.5, 10.0)]
    steps = [{"name": f"step {i + 1}", "t_start": a, "t_end": b, "offered_rate": rate, "delivered_rate": rate * 0.99,
              "confirmed_rate": rate, "loss_before_recovery": 0.001 * i, "loss_after_recovery": 0.0, "p50_ms": 1.0 + i,
              "p99_ms": 5.0 + i, "deliver_p50_ms": 1.5, "deliver_p99_ms": 7.0, "requests": int(rate * 10),
              "failures": 0, "sustained": i == 0, "reasons": [] if i == 0 else ["loss"]}
             for i, (a, b, rate, _, _) in enumerate(phases)]
    # step 1 is written as before the sent rate was recorded; step 2's generator sent 150 of the 200 asked
    steps[1].update(sent_rate=150.0, generator_fell_short=True)
    (directory / "steps.jsonl").write_text("".join(json.dumps(step) + "\n" for step in steps))
    shortfall = {"phase": "step 2", "asked_rate": 200.0, "sent_rate": 150.0, "delivered_rate": 198.0,
                 "backbone_kept_up": False, "backbone_reasons": ["loss"]}
    (directory / "summary.json").write_text(json.dumps({"shape": "step", "subscribers": 2, "max_sustained_rate": 100.0,
                                                        "loss_before_recovery": 0.0005, "loss_after_recovery": 0.0,
                                                        "max_sent_rate": 150.0, "generator_shortfall": shortfall}))
    samples, pushes, cpu, drops = [], 0.0, 1.0, 0.0
    for second in range(T0, T0 + 21):
        samples.append({"t": float(second), "metrics": {
            "fyrehose_pushes_total": pushes, "fyrehose_delivered_total": 2 * pushes,
            'fyrehose_dropped_total{reason="ring full"}': drops,
            'fyrehose_process_cpu_seconds_total{process="backbone"}': cpu, "fyrehose_clients": 7.0}})
        phase = phases[0] if second < T0 + 10 else phases[1]
        pushes, cpu, drops = pushes + phase[2], cpu + phase[3], drops + phase[4]
    (directory / "metrics.jsonl").write_text("".join(json.dumps(sample) + "\n" for sample in samples))
    history = [HISTORY_HEADER]
    for second in range(T0, T0 + 21):
        rate = 100 if second < T0 + 10 else 200
        history.append(f"{second},6,PUSH,publish,{rate},0,1,1,1,2,2,3,4,5,9,9,9,{rate},0,1,1,0.2,9,64")
        history.append(f"{second},6,DELIVER,publish-to-deliver,{2 * rate},0,1,1,1,2,2,3,4,7,9,9,9,{rate},0,1,1,0.2,9,64")
        history.append(f"{second},6,,Aggregated,{3 * rate},0,N/A,N/A,N/A,N/A,N/A,N/A,N/A,N/A,N/A,N/A,N/A,0,0,0,0,0,0,0")
    (directory / "locust_stats_history.csv").write_text("\n".join(history) + "\n")
    (directory / "locust_stats.csv").write_text("\n".join([
        STATS_HEADER,
        "PUSH,publish,3000,0,1.1,2.3,0.2,123,64,150,0,1,1,2,2,4,7,12,26,83,120,120",
        "DELIVER,publish-to-deliver,6000,0,0.8,2.0,0.1,125,64,300,0,0,1,1,2,3,6,11,27,83,130,130",
        ",Aggregated,9000,0,0.9,2.1,0.1,125,64,450,0,0,1,1,2,4,6,11,26,83,130,130"]) + "\n")


def _publish_seconds(payload: bytes) -> float:
    decoded = envelope.decode(payload)
    return json.loads(decoded.data if decoded else payload)["t_ns"] / 1e9


def test_capacity_joins_locust_metrics_and_journal(spark, tmp_path):
    loadtest = tmp_path / "loadtest"
    _write_loadtest(loadtest)
    journal = tmp_path / "journal"
    generate(JournalSpec(messages=3000, start=datetime.fromtimestamp(T0, UTC), rate=150.0, subjects=2, seed=1),
             journal)
    out = tmp_path / "capacity"
    result = run_capacity(spark, CapacityOptions(loadtest, out, journal))

    steps = pq.read_table(out / "capacity_steps.parquet").to_pylist()
    assert [step["name"] for step in steps] == ["step 1", "step 2"]
    assert [step["backbone_pushes_per_s"] for step in steps] == pytest.approx([100.0, 200.0])
    assert [step["backbone_dropped_per_s"] for step in steps] == pytest.approx([0.0, 10.0])
    assert [step["cpu_cores"] for step in result["steps"]] == [pytest.approx({"backbone": 0.25}),
                                                                pytest.approx({"backbone": 0.5})]
    published = [_publish_seconds(row["payload"]) for row in _source_rows(journal)]
    assert [step["journal_messages"] for step in steps] == [
        sum(T0 <= t < T0 + 10 for t in published), sum(T0 + 10 <= t < T0 + 20 for t in published)]
    for index, step in enumerate(steps):  # each step's median sample of its own messages' latencies
        latencies = [_latency_ms(row) for row in _source_rows(journal)
                     if T0 + 10 * index <= _publish_seconds(row["payload"]) < T0 + 10 * (index + 1)]
        assert _is_median_sample(latencies, step["journal_p50_ms"]), index

    timeline = {row["time"]: row for row in pq.read_table(out / "capacity_timeline.parquet").to_pylist()}
    middle = timeline[datetime.fromtimestamp(T0 + 15, UTC)]
    assert (middle["offered_per_s"], middle["confirmed_per_s"], middle["delivered_per_subscriber_per_s"]) == (
        200.0, 200.0, 200.0)
    assert middle["backbone_pushes_per_s"] == pytest.approx(200.0) and middle["journal_per_s"] == 150
    cpu = pq.read_table(out / "capacity_cpu.parquet").to_pylist()
    assert {row["process"] for row in cpu} == {"backbone"} and max(row["cpu_cores"] for row in cpu) == pytest.approx(0.5)
    latency = {row["name"]: row for row in pq.read_table(out / "capacity_latency.parquet").to_pylist()}
    assert latency["publish"]["p99"] == 26.0 and latency["Aggregated"]["request_count"] == 9000

    capacity = json.loads((out / "capacity.json").read_text())
    assert capacity["max_sustained_rate"] == 100.0 and capacity["max_sent_rate"] == 150.0
    assert capacity["generator_shortfall"]["phase"] == "step 2"
    assert [step["sent_rate"] for step in steps] == [None, 150.0]
    html = (out / "capacity.html").read_text()
    assert "asked/s" in html and "sent/s" in html
    assert "fell short: the load generator sent at most 150 msgs/s of the 200 asked" in html
    for chart in ("capacity_rates.png", "capacity_loss.png", "capacity_latency.png", "capacity_cpu.png"):
        _assert_png(out / chart)
        assert f'src="{chart}"' in (out / "capacity.html").read_text()


def test_a_damaged_journal_is_one_error_line(spark, tmp_path, capfd):
    damaged = tmp_path / "damaged"
    generate(JournalSpec(messages=100, seed=2), damaged)
    victim = next((damaged / "parquet").rglob("*.parquet"))
    victim.write_bytes(b"PAR1 this is not parquet PAR1")
    capfd.readouterr()
    assert cli.main(["pipeline", "export", "--journal", str(damaged), "--out", str(tmp_path / "bad"),
                     "--format", "jsonl"]) == 1
    errors = capfd.readouterr().err.strip().splitlines()
    assert len(errors) == 1 and errors[0].startswith("fyrehose pipeline: error: "), errors


@pytest.mark.slow  # two more JVMs: spark-submit's and the command line's own session
def test_spark_submit_and_the_standalone_command_run_the_same_report(journal, tmp_path):
    import os
    import subprocess
    import sys

    import pyspark

    import fyrehose.tools.pipeline

    submit = Path(pyspark.__file__).parent / "bin" / "spark-submit"
    main = Path(fyrehose.tools.pipeline.__file__).parent / "__main__.py"
    environment = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable,
                   "PYSPARK_DRIVER_PYTHON": sys.executable}
    submitted = subprocess.run(
        [str(submit), "--master", "local[1]", "--conf", "spark.ui.enabled=false",
         "--conf", "spark.driver.host=127.0.0.1", str(main),
         "report", "--journal", str(journal), "--out", str(tmp_path / "submitted")],
        env=environment, capture_output=True, timeout=300)
    assert submitted.returncode == 0, submitted.stderr.decode()[-2000:]
    standalone = subprocess.run(
        [sys.executable, "-m", "fyrehose.commands.main", "pipeline", "report", "--journal", str(journal),
         "--out", str(tmp_path / "standalone"), "--master", "local[2]"], capture_output=True, timeout=300)
    assert standalone.returncode == 0, standalone.stderr.decode()[-2000:]
    for out in (tmp_path / "submitted", tmp_path / "standalone"):
        assert [(g["from_seq"], g["to_seq"]) for g in pq.read_table(out / "gaps.parquet").to_pylist()] == list(MISSING)
        assert json.loads((out / "summary.json").read_text())["duplicates"] == len(DUPLICATES)


def test_a_journal_stopped_by_sigterm_is_readable_by_the_report(spark, backbone_factory, tmp_path, capfd):
    """A clean stop seals the last segment and exports it: the report sees every message journaled."""
    from fyrehose import Client
    from fyrehose.runtime.process import wait_until

    from support import JournalProcess, last_written

    backbone = backbone_factory()
    journal = JournalProcess(backbone.address, tmp_path / "journal", "--from", "1").start()
    try:
        wait_until(journal.running, EVENT_WITHIN, "the journal's readiness line")
        with Client(backbone.addr, subscribe=False) as publisher:
            last = publisher.publish_many([b"message %d" % n for n in range(200)])[-1]
        wait_until(lambda: last_written(journal.directory) >= last, EVENT_WITHIN, "the journal writing every message")
    finally:
        assert journal.stop() == 0
    out = tmp_path / "report"
    capfd.readouterr()
    assert cli.main(["pipeline", "report", "--journal", str(journal.directory), "--out", str(out)]) == 0
    written = json.loads((out / "summary.json").read_text())
    assert (written["messages"], written["first_seq"], written["last_seq"], written["missing"]) == (200, 1, last, 0)


def test_no_parquet_names_the_command_that_writes_it(spark, tmp_path, capfd):
    empty = tmp_path / "journal"
    empty.mkdir()
    capfd.readouterr()
    assert cli.main(["pipeline", "report", "--journal", str(empty), "--out", str(tmp_path / "out")]) == 1
    errors = capfd.readouterr().err.strip().splitlines()
    assert len(errors) == 1 and errors[0].endswith(f"(write them with: fyrehose journal export --seal {empty})")


@pytest.mark.slow  # a Spark standalone master, a worker, spark-submit's driver and executors: four JVMs
def test_report_and_export_run_on_a_spark_standalone_cluster(journal, tmp_path):
    """The pyspark distribution's own master and worker on 127.0.0.1, the jobs submitted with spark-submit."""
    import os
    import socket
    import subprocess
    import sys

    import pyspark

    import fyrehose.tools.pipeline
    from fyrehose.runtime.process import ChildProcess, wait_until
    from fyrehose.runtime.readiness import free_port

    home = Path(pyspark.__file__).parent
    main = Path(fyrehose.tools.pipeline.__file__).parent / "__main__.py"
    environment = {**os.environ, "SPARK_HOME": str(home), "SPARK_LOCAL_IP": "127.0.0.1",
                   "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    port = free_port(socket.SOCK_STREAM)
    master_url = f"spark://127.0.0.1:{port}"
    spark_class = str(home / "bin" / "spark-class")
    master = ChildProcess([spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                           "--port", str(port), "--webui-port", str(free_port(socket.SOCK_STREAM))],
                          tmp_path / "master.log", env=environment)
    worker = None
    try:
        wait_until(lambda: "I have been elected leader" in master.output() or not master.alive(), 120,
                   "the Spark master starting")
        assert master.alive(), master.output()[-3000:]
        (tmp_path / "work").mkdir()
        worker = ChildProcess([spark_class, "org.apache.spark.deploy.worker.Worker", master_url,
                               "--host", "127.0.0.1", "--webui-port", str(free_port(socket.SOCK_STREAM)),
                               "--cores", "2", "--memory", "2g", "--work-dir", str(tmp_path / "work")],
                              tmp_path / "worker.log", env=environment)
        wait_until(lambda: "Successfully registered with master" in worker.output() or not worker.alive(), 120,
                   "the Spark worker registering")
        assert worker.alive(), worker.output()[-3000:]

        def submit(*job: str) -> None:
            submitted = subprocess.run(
                [str(home / "bin" / "spark-submit"), "--master", master_url, "--conf", "spark.ui.enabled=false",
                 "--conf", "spark.driver.host=127.0.0.1", "--conf", "spark.executor.memory=1g",
                 "--conf", "spark.sql.shuffle.partitions=4", str(main), *job],
                env=environment, capture_output=True, timeout=600)
            assert submitted.returncode == 0, submitted.stderr.decode()[-3000:]
            assert "app-" in worker.output()  # the job ran in the worker's executors, not in the driver

        submit("report", "--journal", str(journal), "--out", str(tmp_path / "report"))
        gaps = pq.read_table(tmp_path / "report" / "gaps.parquet").to_pylist()
        assert [(gap["from_seq"], gap["to_seq"]) for gap in gaps] == list(MISSING)
        assert json.loads((tmp_path / "report" / "summary.json").read_text())["duplicates"] == len(DUPLICATES)

        submit("export", "--journal", str(journal), "--out", str(tmp_path / "export"), "--format", "jsonl")
        lines = [json.loads(line) for path in sorted((tmp_path / "export" / "jsonl").glob("part-*.json"))
                 for line in path.read_text().splitlines()]
        assert sorted(line["seq"] for line in lines) == sorted(row["seq"] for row in _source_rows(journal))
    finally:
        if worker is not None:
            assert worker.stop(30) is not None
        assert master.stop(30) is not None
