"""``fyrehose bench compiled`` runs every compiled module's cases against its .py and reports them (never timed)."""
from __future__ import annotations

import importlib
import json
import os
import subprocess

import pytest

from fyrehose.runtime.compiled import COMPILED_MODULES, is_compiled
from fyrehose.tools.bench.compiled import CASES, compiled_modules

from support import FYREHOSE, run_cli


def test_every_compiled_module_has_bench_cases():
    assert set(CASES) == set(COMPILED_MODULES)


def test_unknown_modules_are_refused():
    with pytest.raises(ValueError, match="no bench cases for fyrehose.protocol.nothing"):
        compiled_modules(["fyrehose.protocol.nothing"])


def test_the_bench_times_both_builds_of_every_compiled_module(tmp_path):
    if not any(is_compiled(importlib.import_module(name)) for name in COMPILED_MODULES):
        pytest.skip("no compiled build here (installed without Cython, or FYREHOSE_PURE set): nothing to time")
    out = tmp_path / "compiled.json"
    result = run_cli("bench", "compiled", "--rounds", "2", "--case-seconds", "0.005", "--json", str(out), timeout=120)
    assert result.returncode == 0, result.stderr.decode()
    doc = json.loads(out.read_text())
    assert {case["module"] for case in doc["cases"]} == set(COMPILED_MODULES)
    for case in doc["cases"]:
        assert len(case["pure_us"]) == len(case["compiled_us"]) == 3 and min(case["compiled_us"]) > 0
    assert "gain" in result.stdout.decode()


def test_without_a_compiled_build_the_bench_says_so_in_one_line():
    env_pure = dict(os.environ, FYREHOSE_PURE="1")
    result = subprocess.run(FYREHOSE + ["bench", "compiled"], capture_output=True, env=env_pure, timeout=60)
    assert result.returncode == 1
    assert result.stderr.decode().strip().splitlines() == [
        "fyrehose bench: error: bench compiled: none of these modules runs compiled here (see fyrehose --version)"]
