"""The bench's host-tuning options: every target's server and the load generators pinned alike, traces."""
from __future__ import annotations

import argparse
import json
import os

import pytest

from fyrehose.commands.bench import _cpus

from support import run_cli


@pytest.mark.parametrize("text, cpus", [("0", (0,)), ("0,2", (0, 2)), ("2-3,0", (0, 2, 3)), ("1,1", (1,))])
def test_a_cpu_list_reads_as_taskset_writes_it(text, cpus):
    assert _cpus(text) == cpus


@pytest.mark.parametrize("text", ["", "a", "1-0", "-1", "0,,1", "1-"])
def test_a_bad_cpu_list_is_refused(text):
    with pytest.raises(argparse.ArgumentTypeError):
        _cpus(text)


def test_pinning_to_a_cpu_the_host_lacks_is_one_line_and_exit_1(tmp_path):
    missing = max(os.sched_getaffinity(0)) + 1
    done = run_cli("bench", "--targets", "fyrehose-single", "--rate", "1000", "--duration", "0.5", "--rounds", "1",
                   "--server-cpus", str(missing), timeout=120)
    lines = done.stderr.decode().strip().splitlines()
    assert done.returncode == 1 and lines[-1].startswith("fyrehose bench: error:") and "cannot pin" in lines[-1]


def test_a_traced_step_leaves_one_trace_per_single_process_step(tmp_path):
    trace = tmp_path / "trace"
    done = run_cli("bench", "--targets", "fyrehose-single", "--rate", "2000", "--duration", "1", "--rounds", "1",
                   "--trace", str(trace), "--server-cpus", "0", "--generator-cpus", "0", timeout=120)
    assert done.returncode == 0, done.stderr.decode()
    (step,) = sorted(trace.glob("*.trace"))
    assert step.read_text().count("\n") > 0


def test_dropped_datagrams_are_requested_recovered_and_timed_in_the_recovery_column(tmp_path):
    out = tmp_path / "b.json"
    done = run_cli("bench", "--targets", "fyrehose-single", "--rate", "20000", "--duration", "2", "--rounds", "1",
                   "--drop-every", "20", "--json", str(out), timeout=120)
    assert done.returncode == 0, done.stderr.decode()
    (result,) = json.loads(out.read_text())["results"]
    (step,) = result["rounds"][0]["steps"]
    assert step["anomalies"]["REQUESTs"] > 0 and step["anomalies"]["recovered frames"] > 0
    assert result["holes"] > 0 and 0 < result["recovery_p50_ms"] <= result["recovery_p99_ms"]
    assert "recovery p50/p99 ms" in done.stdout.decode()
