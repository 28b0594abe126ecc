"""``fyrehose gateway bench --stages``: every pure stage of a gateway is timed (the figures come from the command)."""
from __future__ import annotations

import json

from fyrehose.tools.bench import gateway_stages as bench_stages

from support import run_cli


def test_every_stage_is_timed_with_a_figure():
    figures = bench_stages.stages(seconds=0.01)
    assert len(figures) >= 15
    assert all(isinstance(value, float) and value >= 0 for value in figures.values())
    assert any(name.startswith("redis: parse") and "compiled pass" in name for name in figures)
    table = bench_stages.table(figures)
    assert all(name in table for name in figures)


def test_the_command_prints_the_stages_as_json():
    result = run_cli("gateway", "bench", "--stages", "--json", timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    figures = json.loads(result.stdout)
    assert "stream: decode the envelope" in figures
