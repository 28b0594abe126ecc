"""The offline stage timer of the load test's sessions runs them end to end against the pure core."""
from __future__ import annotations

import json

from fyrehose.tools.bench.loadtest_stages import STAGES, main, measure


def test_every_request_is_confirmed_and_delivered_and_each_stage_is_timed():
    result = measure(batch=50, payload=64, requests=20)  # raises unless all 20 confirmed and 1,000 delivered
    figures = result["us_per_message"]
    assert set(figures) == {*STAGES, "sessions"} and all(value >= 0 for value in figures.values())
    assert figures["sessions"] == figures["publish"] + figures["confirm"] + figures["deliver"]


def test_the_command_prints_the_table_and_writes_json(tmp_path, capsys):
    assert main(["--batch", "10", "--requests", "5", "--json", str(tmp_path / "s.json")]) == 0
    assert "sessions" in capsys.readouterr().out
    assert json.loads((tmp_path / "s.json").read_text())["requests"] == 5


def test_bad_options_are_one_line_and_exit_1(capsys):
    assert main(["--payload", "4"]) == 1
    assert capsys.readouterr().err.count("\n") == 1
