"""The pipeline's pure parts and its command line up to the point where Spark would start (no JVM here)."""
from __future__ import annotations

import json
from datetime import UTC, date, datetime, timedelta, timezone

import pyarrow.parquet as pq
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fyrehose.journal.parquet import SCHEMA
from fyrehose.tools.pipeline.generate import JournalSpec, generate, subject_name
from fyrehose.tools.pipeline.html_page import HtmlPage
from fyrehose.tools.pipeline.loadtest_inputs import column_name
from fyrehose.tools.pipeline.timerange import (
    MAX_WINDOWS,
    WINDOW_STEPS,
    TimeFormatError,
    TimeRange,
    choose_window,
    parse_time,
    partition_key,
)

from support import run_cli

UTC = UTC
instants = st.datetimes(min_value=datetime(1990, 1, 1), max_value=datetime(2200, 1, 1), timezones=st.just(UTC))


def test_parse_time_forms():
    assert parse_time("2024-05-01T13:04:05Z") == datetime(2024, 5, 1, 13, 4, 5, tzinfo=UTC)
    assert parse_time("2024-05-01T15:04:05+02:00") == datetime(2024, 5, 1, 13, 4, 5, tzinfo=UTC)
    assert parse_time("2024-05-01 13:04") == datetime(2024, 5, 1, 13, 4, tzinfo=UTC)  # no offset: UTC
    assert parse_time("1714568645.5") == datetime(2024, 5, 1, 13, 4, 5, 500000, tzinfo=UTC)
    for bad in ("yesterday", "2024-13-01", "1e400", ""):
        with pytest.raises(TimeFormatError):
            parse_time(bad)


def test_time_range_must_be_ordered():
    with pytest.raises(TimeFormatError):
        TimeRange(parse_time("2024-05-01T01:00Z"), parse_time("2024-05-01T01:00Z"))


@given(start=instants, length=st.integers(1, 10 * 86400 * 10**6), probe=st.floats(0, 1, exclude_max=True))
def test_partition_bounds_cover_every_instant_in_range(start, length, probe):
    end = start + timedelta(microseconds=length)
    inside = start + timedelta(microseconds=int(length * probe))
    time_range = TimeRange(start, end)
    assert time_range.first_partition() <= partition_key(inside) <= time_range.last_partition()
    assert partition_key(end) >= time_range.last_partition()
    # the bounds are tight: the first and last partitions do hold instants of the range
    assert time_range.first_partition() == partition_key(start)
    assert time_range.last_partition() == partition_key(end - timedelta(microseconds=1))


def test_partition_key_is_utc_date_and_hour():
    assert partition_key(datetime(2024, 5, 2, 1, 30, tzinfo=timezone(timedelta(hours=3)))) == (date(2024, 5, 1), 22)


@given(span=st.floats(0, 10**9))
def test_choose_window_gives_at_most_max_windows_and_is_the_shortest(span):
    window = choose_window(span)
    assert span / window <= MAX_WINDOWS
    shorter = [step for step in WINDOW_STEPS if step < window]
    assert all(span / step > MAX_WINDOWS for step in shorter)


def test_locust_headers_become_identifiers():
    assert [column_name(h) for h in ("Requests/s", "99.9%", "50%", "User Count", "Total Request Count", "Type")] == [
        "requests_s", "p99_9", "p50", "user_count", "total_request_count", "type"]


def test_html_page_escapes_everything(tmp_path):
    page = HtmlPage("<title & more>")
    page.facts({"<k>": "<v>"})
    page.table(["<h>"], [["<script>alert(1)</script>"], [1234567], [None]])
    text = page.write(tmp_path / "r.html").read_text()
    assert "<script>" not in text and "&lt;script&gt;" in text and "&lt;title &amp; more&gt;" in text
    assert "1,234,567" in text and "–" in text


def test_generated_journal_has_the_journal_layout_schema_and_known_holes(tmp_path):
    spec = JournalSpec(messages=5000, rate=1.0, start=datetime(2024, 5, 1, 23, 0, tzinfo=UTC),
                       missing=((10, 12), (3600, 3700)), duplicates=(5, 4000), unrecorded=((10, 12),),
                       segment_messages=1000, subjects=3, raw_share=0.2)
    result = generate(spec, tmp_path / "j")
    assert result.rows == 5000 + 2
    seqs, subjects = [], set()
    for path in result.files:
        relative = path.relative_to(tmp_path / "j" / "parquet")
        day, hour, name = relative.parts
        table = pq.read_table(path)
        assert table.schema.equals(SCHEMA)
        first = table.column("seq")[0].as_py()
        assert name == f"seg-{first:016d}.parquet"
        for moment in table.column("received_at").to_pylist():
            assert (day, hour) == (f"date={moment:%Y-%m-%d}", f"hour={moment:%H}")
        assert table.column("size").to_pylist() == [len(p) for p in table.column("payload").to_pylist()]
        seqs += table.column("seq").to_pylist()
        subjects |= set(table.column("subject").to_pylist())
    held = set(range(1, spec.last_seq + 1)) - set(range(10, 13)) - set(range(3600, 3701))
    assert sorted(seqs) == sorted(list(held) + [5, 4000])
    assert subjects == {subject_name(0), subject_name(1), subject_name(2), None}
    lines = [json.loads(line) for line in (tmp_path / "j" / "gaps.jsonl").read_text().splitlines()]
    assert [(g["from_seq"], g["to_seq"]) for g in lines] == [(3600, 3700)]  # (10, 12) left unrecorded
    datetime.fromisoformat(lines[0]["recorded_at"])


@pytest.mark.parametrize("bad", [
    dict(missing=((1, 3),)),  # the first sequence must be held
    dict(missing=((20, 30), (25, 40))),  # overlapping
    dict(duplicates=(20,), missing=((20, 30),)),  # a duplicate of a missing sequence
    dict(unrecorded=((5, 6),)),  # not among the missing
    dict(messages=1),
])
def test_generator_refuses_impossible_journals(tmp_path, bad):
    with pytest.raises(ValueError):
        generate(JournalSpec(**{"messages": 100, **bad}), tmp_path / "j")


def _one_error_line(result) -> str:
    assert result.returncode != 0
    lines = result.stderr.decode().strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_cli_refuses_bad_input_before_starting_spark(tmp_path):
    assert "no such directory" in _one_error_line(
        run_cli("pipeline", "report", "--journal", str(tmp_path / "none"), "--out", str(tmp_path / "o")))
    (tmp_path / "empty").mkdir()
    assert "no Parquet files" in _one_error_line(
        run_cli("pipeline", "export", "--journal", str(tmp_path / "empty"), "--out", str(tmp_path / "o"),
                "--format", "jsonl"))
    assert "neither ISO-8601" in _one_error_line(
        run_cli("pipeline", "report", "--journal", str(tmp_path), "--out", str(tmp_path / "o"), "--from", "soon"))
    assert "must be the last token" in _one_error_line(
        run_cli("pipeline", "export", "--journal", str(tmp_path), "--out", str(tmp_path / "o"), "--format", "parquet",
                "--subject", "a.>.b"))
    assert "missing steps.jsonl" in _one_error_line(
        run_cli("pipeline", "capacity", "--loadtest", str(tmp_path / "empty"), "--out", str(tmp_path / "o")))
    assert "invalid choice" in _one_error_line(
        run_cli("pipeline", "export", "--journal", str(tmp_path), "--out", str(tmp_path / "o"), "--format", "csv"))
    assert "KEY=VALUE" in _one_error_line(
        run_cli("pipeline", "report", "--journal", str(tmp_path), "--out", str(tmp_path / "o"), "--conf", "novalue"))
    assert "not empty" in _one_error_line(
        run_cli("pipeline", "generate", "--out", str(tmp_path), "--messages", "10"))


def test_cli_generate_writes_the_journal_it_describes(tmp_path):
    result = run_cli("pipeline", "generate", "--out", str(tmp_path / "j"), "--messages", "3000", "--gaps", "4",
                     "--duplicates", "3", "--seed", "7")
    assert result.returncode == 0, result.stderr
    described = json.loads(result.stdout)
    seqs = sorted(seq for path in (tmp_path / "j" / "parquet").rglob("*.parquet")
                  for seq in pq.read_table(path, columns=["seq"]).column("seq").to_pylist())
    missing = set().union(*(range(low, high + 1) for low, high in described["missing"]))
    assert len(described["missing"]) == 4 and len(described["duplicates"]) == 3
    expected = sorted([s for s in range(1, described["last_seq"] + 1) if s not in missing] + described["duplicates"])
    assert seqs == expected and described["rows"] == len(expected) == 3000 + 3
