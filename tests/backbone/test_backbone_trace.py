"""The single-process backbone's opt-in stage trace and its report."""
from __future__ import annotations

import gc
import json
import struct

import pytest

from fyrehose.backbone.single.trace import STAGES, StageTrace, load, main, summarise
from fyrehose.protocol import codec

from support import run_cli


def stamped_push(stamp: int) -> bytes:
    return codec.encode_push(b"@" + struct.pack(">Q", stamp) + b"x" * 20)


def test_one_push_datagram_in_every_n_is_recorded_with_its_stages_in_order_and_its_collections(tmp_path):
    path = tmp_path / "t.trace"
    trace = StageTrace(path, every=2)
    for round_ in range(3):
        trace.woke()
        assert trace.received(codec.encode(codec.Keepalive(token=bytes(16)))) is None  # not a PUSH: not counted
        for i in range(2):
            record = trace.received(stamped_push(1000 + round_ * 2 + i))
            if record is not None:
                trace.sequenced(record)
        if round_ == 1:
            gc.collect()
        trace.flushed()
        trace.sent()
    trace.close()
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["published"] for r in records] == [1001, 1003, 1005]  # the second PUSH of each wake-up
    for record in records:
        times = [record[stage] for stage in STAGES]
        assert times == sorted(times) and record["drained"] == 3
    assert [r["gc_ns"] > 0 for r in records] == [False, True, False] and records[1]["gc_generation"] == 2


def test_the_report_compares_the_slowest_with_all_stage_by_stage(tmp_path):
    records = []
    for i in range(2000):
        slow = 500 if i in (7, 8) else 0  # two records (the slowest 0.1 %) waited 500 us more to be taken
        base = i * 10_000
        records.append({"published": base, "woke": base + 50_000 + slow * 1000, "received": base + 60_000 + slow * 1000,
                        "sequenced": base + 80_000 + slow * 1000, "flushed": base + 90_000 + slow * 1000,
                        "sent": base + 190_000 + slow * 1000, "drained": 1, "gc_ns": 0, "gc_generation": -1})
    path = tmp_path / "t.trace"
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + '{"woke": 1}\n')  # an incomplete line is skipped
    summary = summarise(load(path))
    assert summary["records"] == 2000
    assert summary["all"]["published->woke"] == 50.0 and summary["slowest"]["published->woke"] > 300
    assert summary["slowest"]["flushed->sent"] == 100.0
    assert main([str(path), "--json", str(tmp_path / "s.json")]) == 0
    assert json.loads((tmp_path / "s.json").read_text())["records"] == 2000


def test_a_missing_trace_is_one_error_line(tmp_path, capsys):
    assert main([str(tmp_path / "none.trace")]) == 1
    assert capsys.readouterr().err.count("\n") == 1


@pytest.mark.parametrize("args, message", [
    (["--workers", "2", "--trace", "x.trace"], "--trace needs the single-process backbone"),
    (["--trace-every", "0"], "--trace-every must be at least 1"),
])
def test_bad_trace_options_are_one_line_and_exit_non_zero(tmp_path, args, message):
    done = run_cli("backbone", "--listen", "127.0.0.1:0", "--state-dir", str(tmp_path / "s"), *args)
    lines = done.stderr.decode().strip().splitlines()
    assert done.returncode != 0 and len(lines) == 1 and message in lines[0]
