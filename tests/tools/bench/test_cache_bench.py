"""``fyrehose cache bench``: a short run gives every figure (no rate or time is judged)."""
from __future__ import annotations

import json

from support import run_cli

UPDATES = 40000  # the cache's CPU for them spans many of the 10 ms ticks its process's CPU time is counted in


def test_cache_bench_reports_snapshot_times_last_values_and_cpu_per_update():
    result = run_cli("cache", "bench", "--updates", str(UPDATES), "--subjects", "50", "--json", timeout=180)
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    figures = json.loads(result.stdout)
    assert figures["updates"] == UPDATES and figures["subjects"] == 50
    assert figures["at_last_value_ok_after_1s"] == 50
    assert figures["caught_up_after_s"] is not None
    assert figures["snapshots"] >= 1 and figures["cache_cpu_us_per_update"] > 0
    for key in ("published_per_s", "snapshot_ms_p50", "snapshot_ms_p99", "snapshot_ms_max", "snapshots_over_100ms",
                "snapshots_unanswered"):
        assert key in figures


def test_cache_bench_table_and_bad_input():
    result = run_cli("cache", "bench", "--updates", "2000", "--subjects", "20", timeout=180)
    assert result.returncode == 0 and "cache CPU µs per update" in result.stdout.decode()
    result = run_cli("cache", "bench", "--updates", "10", "--subjects", "20")
    assert result.returncode != 0 and len(result.stderr.decode().strip().splitlines()) == 1
