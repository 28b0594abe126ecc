"""``fyrehose bench --multicast``: its arithmetic, then one short real run in the namespace it creates."""
from __future__ import annotations

import array
import io
import json
import subprocess

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fyrehose.tools.bench import scaling
from fyrehose.tools.bench.multicast import (
    MODES,
    SUBSCRIBER_COUNTS,
    StepFigures,
    figures,
    multicast_projection,
    summarize,
    write_table,
)
from fyrehose.tools.bench.orchestra import StepResult
from fyrehose.tools.bench.search import StepOutcome

from netns import namespaces_available
from support import run_cli

PIPELINE_CPU = {"server": 1.0, "server/fh-receiver-0": 20.0, "server/fh-sequencer": 30.0, "server/fh-fanout-0": 40.0,
                "publisher-1": 90.0, "subscriber-1": 50.0}


def step(cpu: dict[str, float], delivered: float) -> StepResult:
    return StepResult(StepOutcome(None, delivered * 1.01, delivered, 0.01), array.array("q"), cpu, 80.0, {})


def test_the_backbone_cost_counts_every_server_process_and_nothing_else():
    got = figures("unicast", 4, step(PIPELINE_CPU, 100_000.0))
    assert got.backbone_cpu_percent == pytest.approx(91.0)
    assert got.backbone_us_per_message == pytest.approx(91.0 * 1e4 / 100_000)  # 9.1 us
    assert got.stage_costs_us["fanout_us"] == pytest.approx(40.0 * 1e4 / 100_000 / 4)  # per copy: 4 subscribers
    multicast = figures("multicast", 4, step(PIPELINE_CPU, 100_000.0))
    assert multicast.stage_costs_us["fanout_us"] == pytest.approx(40.0 * 1e4 / 100_000)  # the group's one copy
    assert figures("unicast", 4, step({"server": 50.0}, 1000.0)).stage_costs_us is None  # one process: no stages


@given(st.floats(0.01, 5.0), st.floats(0.01, 5.0), st.floats(0.001, 5.0), st.sampled_from(scaling.CORES),
       st.sampled_from(scaling.SUBSCRIBERS))
def test_the_multicast_projection_is_the_slowest_stage_whatever_the_subscribers(receive, sequence, fanout, cores,
                                                                               subscribers):
    costs = scaling.StageCosts(receive, sequence, fanout)
    row = multicast_projection(costs, cores, subscribers)
    expected = min((cores - 2) / receive, 1 / sequence, 1 / fanout) * 1e6
    assert row["msgs_per_s"] == pytest.approx(expected)
    assert row == {**multicast_projection(costs, cores, 4), "subscribers": subscribers}
    assert row["receive_workers"] + row["fanout_workers"] + 1 == cores


def test_summary_takes_medians_per_mode_and_projects_only_from_the_pipeline():
    steps = [StepFigures(mode, subscribers, 1.0, 100.0 * index, 0.0, 50.0, float(index), None, {})
             for subscribers in SUBSCRIBER_COUNTS for mode in MODES for index in (1, 2, 9)]
    doc = summarize(steps)
    assert [row["subscribers"] for row in doc["rows"]] == list(SUBSCRIBER_COUNTS)
    assert all(row[mode]["backbone_us_per_message"] == 2.0 and row[mode]["delivered_per_sub_per_s"] == 200.0
               and row[mode]["rounds"] == 3 for row in doc["rows"] for mode in MODES)
    assert doc["scaling"] is None
    costs = {"receive_us": 0.05, "sequence_us": 0.15, "fanout_us": 0.02}
    piped = summarize([StepFigures(mode, 4, 1.0, 1.0, 0.0, 1.0, 1.0, costs, {}) for mode in MODES])
    rows = piped["scaling"]["rows"]
    assert len(rows) == 2 * len(scaling.CORES) * len(scaling.SUBSCRIBERS)
    assert [row["layout"] for row in rows[:2]] == ["unicast", "multicast"]
    many = next(row for row in rows if row["layout"] == "unicast" and row["cores"] == 8 and row["subscribers"] == 256)
    assert many["bottleneck"] == "fanout"
    assert all(row["msgs_per_s"] == pytest.approx(1 / 0.15 * 1e6) for row in rows if row["layout"] == "multicast")
    out = io.StringIO()
    write_table({"machine": {"cores": 2}, "settings": {"workers": 1, "payload": 64, "rate": None, "rounds": 1},
                 **piped}, out)
    assert "multicast msgs/s" in out.getvalue() and out.getvalue().count("\n") == 3 + 1 + len(rows) // 2 + 1


@pytest.mark.skipif(namespaces_available() is not None, reason=str(namespaces_available()))
def test_a_short_run_measures_both_modes_in_its_own_namespace_and_removes_it(tmp_path):
    out = tmp_path / "multicast.json"
    done = run_cli("bench", "--multicast", "--duration", "0.5", "--rate", "2000", "--rounds", "1",
                   "--workers", "1", "--fanout", "1", "--json", str(out), timeout=240)
    assert done.returncode == 0, done.stderr.decode()
    doc = json.loads(out.read_text())
    assert doc["settings"]["namespace"].startswith("fyrehose-bench-")
    namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    assert doc["settings"]["namespace"] not in namespaces
    for row in doc["rows"]:
        for mode in MODES:
            # the backbone's CPU is read over the 0.5 s window in clock ticks: on a busy machine it can get no tick
            # of a core in it, so the figure is checked to be a measurement (a number, never negative), not its size
            assert row[mode]["delivered_per_sub_per_s"] > 0 and row[mode]["backbone_us_per_message"] >= 0
    assert {(s["mode"], s["subscribers"]) for s in doc["steps"]} == {(m, n) for m in MODES for n in SUBSCRIBER_COUNTS}
    assert all(s["anomalies"].get("datagrams from strangers", 0) == 0 for s in doc["steps"])
    assert doc["scaling"] is not None and "multicast msgs/s" in done.stdout.decode()



@pytest.mark.parametrize("args", [["client", "--multicast"], ["--multicast", "--targets", "redis"]])
def test_what_the_multicast_bench_does_not_measure_is_refused_in_one_line(args):
    done = run_cli("bench", *args)
    err = done.stderr.decode().strip().splitlines()
    assert done.returncode == 1 and len(err) == 1 and "no client mode, no --targets" in err[0]
