"""``fyrehose journal`` on the command line: verify, inspect, export, bad input, and the progress bar."""
from __future__ import annotations

import io
from datetime import UTC, datetime

import pytest

from fyrehose.journal.progress import Progress
from fyrehose.journal.segment import encode_block
from fyrehose.journal.store import JournalStore
from fyrehose.protocol.codec import encode_deliver
from fyrehose.protocol.tracker import Lost, Message

from support import free_port, run_cli

RECEIVED = int(datetime(2024, 5, 1, 13, 0, tzinfo=UTC).timestamp()) * 10**6


def make_journal(directory, *, seal=True):
    """Sequences 1..30 with 11..12 lost, in two segments (the second unsealed unless ``seal``)."""
    store = JournalStore(directory, clock=lambda: RECEIVED)
    store.open()
    store.write([Message(seq, b"message %d" % seq) for seq in range(1, 6)])  # a block of 118 bytes at offset 8
    store.write([Message(seq, b"message %d" % seq) for seq in range(6, 11)])  # the next one at 126
    store.seal_active()
    store.write([Lost(11, 12, "not recovered"), *[Message(seq, b"message %d" % seq) for seq in range(13, 31)]])
    if seal:
        store.seal_active()
    store.close()
    return directory


def one_error_line(result):
    lines = result.stderr.decode().strip().splitlines()
    assert result.returncode != 0
    assert len(lines) == 1, lines
    assert "error" in lines[0] and "Traceback" not in result.stderr.decode()
    return lines[0]


@pytest.mark.parametrize("action", ["verify", "inspect", "export", "bench"])
def test_every_action_has_help(action):
    result = run_cli("journal", action, "--help")
    assert result.returncode == 0 and f"usage: fyrehose journal {action}".encode() in result.stdout


def test_journal_help_shows_the_run_options_and_the_actions():
    out = run_cli("journal", "--help").stdout.decode()
    for word in ("--backbone", "--dir", "--fsync", "--retain", "verify", "inspect", "export", "bench"):
        assert word in out


@pytest.mark.parametrize("args", [
    ["journal"],
    ["journal", "--dir", "x", "--fsync", "sometimes"],
    ["journal", "--dir", "x", "--retain", "5parsecs"],
    ["journal", "--dir", "x", "--segment-size", "10min"],
    ["journal", "--dir", "x", "--give-up", "0"],
    ["journal", "--dir", "x", "--backbone", "127.0.0.1:99999"],
    ["journal", "verify", "/nonexistent/journal"],
    ["journal", "inspect", "/nonexistent/journal"],
    ["journal", "export", "/nonexistent/journal"],
    ["journal", "inspect", ".", "--records", "9..2"],
    ["journal", "bench", "--fsync", "sometimes"],
])
def test_bad_input_is_one_line_and_a_nonzero_exit(args):
    one_error_line(run_cli(*args))


def test_retain_takes_durations_like_every_duration_option_and_sizes():
    from fyrehose.commands.main import build_parser
    from fyrehose.journal.retention import Retention, parse_retention

    for ages, seconds in ((["15"], 15), (["15s"], 15), (["1m30s"], 90), (["1h"], 3600), (["7d"], 7 * 86400)):
        args = build_parser().parse_args(["journal", "--dir", "x", "--retain", *ages, "--retain", "10GB"])
        assert parse_retention(args.retain) == Retention(max_age=seconds, max_bytes=10 * 10**9)
    args = build_parser().parse_args(["journal", "--dir", "x", "--segment-age", "1m30s"])
    assert args.segment_age == 90


def test_no_backbone_is_one_line(tmp_path):
    result = run_cli("journal", "--dir", str(tmp_path / "j"), "--backbone", f"127.0.0.1:{free_port()}", timeout=60)
    assert "no KEEPALIVE-ACK" in one_error_line(result)


def test_verify_passes_a_sound_journal_and_shows_what_it_checked(tmp_path):
    result = run_cli("journal", "verify", str(make_journal(tmp_path / "j")))
    out = result.stdout.decode()
    assert result.returncode == 0, out
    assert "28 records, sequences 1..30" in out and "1 ranges, 2 sequences recorded lost" in out
    assert out.strip().endswith("OK")
    assert result.stderr == b""  # no progress bar when stderr is not a terminal


def test_verify_reports_an_unrecorded_hole_and_damage(tmp_path):
    directory = make_journal(tmp_path / "j")
    (directory / "gaps.jsonl").write_bytes(b"")  # the record of 11..12 is gone
    with open(sorted((directory / "segments").glob("*.log"))[0], "r+b") as file:
        file.seek(130)  # inside the second block
        file.write(b"\xff")
    result = run_cli("journal", "verify", str(directory))
    out = result.stdout.decode()
    assert "3 problem(s)" in one_error_line(result)
    assert "seg-0000000000000001.log: damaged record at offset 126 (bad checksum)" in out
    assert "seg-0000000000000001.log: its summary seg-0000000000000001.idx does not match its records" in out
    assert "sequences 6..12 are neither in a segment nor in gaps.jsonl" in out
    assert "FAILED" in out


def test_verify_accepts_a_torn_tail_as_a_crash_leftover(tmp_path):
    directory = make_journal(tmp_path / "j", seal=False)
    with open(sorted((directory / "segments").glob("*.log"))[-1], "ab") as file:
        file.write(encode_block(31, 1, RECEIVED, encode_deliver(31, b"cut short"))[:-5])
    result = run_cli("journal", "verify", str(directory))
    assert result.returncode == 0
    assert "torn tail" in result.stdout.decode()


def test_inspect_lists_segments_gaps_and_the_resume_point(tmp_path):
    directory = make_journal(tmp_path / "j", seal=False)
    result = run_cli("journal", "inspect", str(directory))
    assert result.returncode == 0, result.stderr
    out = result.stdout.decode()
    assert "seg-0000000000000001.log" in out and "sealed" in out
    assert "seg-0000000000000013.log" in out and "active" in out
    assert "lost 11..12" in out and "resumes at: 31" in out
    assert "2024-05-01T13:00:00.000000+00:00" in out


def test_inspect_prints_records(tmp_path):
    directory = make_journal(tmp_path / "j")
    result = run_cli("journal", "inspect", str(directory), "--records", "9..14")
    assert result.returncode == 0
    lines = result.stdout.decode().splitlines()
    assert [line.split("\t")[0] for line in lines] == ["9", "10", "13", "14"]
    assert lines[0] == "9\t2024-05-01T13:00:00.000000+00:00\t-\tmessage 9"


def test_export_writes_parquet_then_verify_checks_it(tmp_path):
    directory = make_journal(tmp_path / "j", seal=False)
    result = run_cli("journal", "export", str(directory), "--seal")
    assert result.returncode == 0, result.stderr
    assert "exported 2 segment(s), 28 records, into 2 Parquet file(s)" in result.stdout.decode()
    files = sorted(p.relative_to(directory) for p in (directory / "parquet").rglob("*.parquet"))
    assert [str(f) for f in files] == [
        "parquet/date=2024-05-01/hour=13/seg-0000000000000001.parquet",
        "parquet/date=2024-05-01/hour=13/seg-0000000000000013.parquet",
    ]
    assert "exported 0 segment(s)" in run_cli("journal", "export", str(directory)).stdout.decode()
    assert "exported 2 segment(s)" in run_cli("journal", "export", str(directory), "--force").stdout.decode()
    result = run_cli("journal", "verify", str(directory))
    assert result.returncode == 0 and "parquet: 2 files checked" in result.stdout.decode()


def test_export_refuses_a_directory_a_journal_is_using(tmp_path):
    directory = make_journal(tmp_path / "j")
    store = JournalStore(directory)
    store.open()
    try:
        assert "in use by another journal" in one_error_line(run_cli("journal", "export", str(directory)))
    finally:
        store.close()


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_progress_bar_draws_only_on_a_terminal():
    terminal, pipe = Terminal(), io.StringIO()
    for stream in (terminal, pipe):
        with Progress(4 << 20, "verify", stream) as bar:
            bar.advance(1 << 20)
            bar.advance(3 << 20)
    assert pipe.getvalue() == ""
    drawn = terminal.getvalue()
    assert drawn.startswith("\rverify [") and drawn.endswith("100.0% 4.0 MiB/4.0 MiB\n")
    assert "#" * 30 in drawn
