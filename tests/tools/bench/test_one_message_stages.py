"""``python -m fyrehose.tools.bench.one_message`` times every stage of the one-message path and reports it (never timed)."""
from __future__ import annotations

import io
import subprocess
import sys

import pytest

from fyrehose.tools.bench import one_message


def test_every_stage_is_reported_with_its_spread():
    out = io.StringIO()
    assert one_message.main(["--rounds", "2", "--datagrams", "30"], out) == 0
    lines = out.getvalue().splitlines()
    for stage in one_message.STAGES:
        row = next(line for line in lines if line.strip().startswith(stage))
        low, middle, high = map(float, row.split()[-3:])
        assert 0 < low <= middle <= high


def test_the_stages_run_the_path_they_name():
    figures = one_message.measure(1, 20)
    assert set(figures) == set(one_message.STAGES) and all(len(values) == 1 for values in figures.values())


@pytest.mark.parametrize("argument", ["--rounds", "--datagrams"])
def test_nothing_to_time_is_refused_in_one_line(argument):
    result = subprocess.run([sys.executable, "-m", "fyrehose.tools.bench.one_message", argument, "0"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].endswith("--rounds and --datagrams must be at least 1")
