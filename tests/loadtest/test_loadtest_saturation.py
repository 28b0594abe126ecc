"""Which side of a load test saturated: from CPU samples to the verdict per phase."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fyrehose.loadtest.saturation import (
    HOST_SATURATED,
    SATURATED,
    PhaseLoad,
    Sample,
    describe,
    phase_load,
    read_samples,
)

BACKBONE = 'fyrehose_process_cpu_seconds_total{process="backbone"}'


def line(t: float, backbone: float | None, sequenced: float | None, host: dict | None = None,
         **generator: float) -> dict:
    metrics = {}
    if backbone is not None:
        metrics[BACKBONE] = backbone
    if sequenced is not None:
        metrics["fyrehose_pushes_total"] = sequenced
    found = {"t": t, "metrics": metrics, "generator_cpu_seconds": generator}
    if host is not None:
        found["host_cpu_seconds"] = host
    return found


def host(busy: float, idle: float) -> dict:
    """psutil.cpu_times() fields of a host: ``busy`` seconds spread over user, system and softirq."""
    return {"user": busy / 2, "system": busy / 4, "softirq": busy / 4, "idle": idle, "iowait": 0.0,
            "guest": busy / 2}  # guest is counted in user already


def samples(*lines: dict) -> list[Sample]:
    return [Sample.from_line(item) for item in lines]


def test_a_busy_load_generator_beside_an_idle_backbone_is_the_limit():
    run = samples(line(100.0, 10.0, 1_000_000, locust=50.0), line(101.0, 10.3, 1_500_000, locust=50.5),
                  line(105.0, 11.5, 3_500_000, locust=54.8))
    load = phase_load(run, 100.0, 105.0)
    assert load.backbone_busiest == pytest.approx(0.3)
    assert load.generator_busiest == pytest.approx(0.96)
    assert load.backbone_us_per_message == pytest.approx(1.5 / 2_500_000 * 1e6)
    assert load.saturated == "load generator"
    assert "the load generator saturated" in describe(load) and "96%" in describe(load) and "0.60 us" in describe(load)


def test_the_busiest_process_of_each_side_counts_and_the_backbone_cost_sums_its_processes():
    sequencer = 'fyrehose_process_cpu_seconds_total{process="sequencer"}'
    first = line(0.0, 1.0, 0, **{"locust": 1.0, "locust-worker-1": 1.0})
    last = line(10.0, 4.0, 10_000_000, **{"locust": 2.0, "locust-worker-1": 10.5})
    first["metrics"][sequencer], last["metrics"][sequencer] = 0.0, 9.5
    load = phase_load(samples(first, last), 0.0, 10.0)
    assert load.backbone_busiest == pytest.approx(0.95)  # the sequencer, not the receive worker
    assert load.generator_busiest == pytest.approx(0.95)  # the worker, not the master
    assert load.backbone_us_per_message == pytest.approx((3.0 + 9.5) / 10_000_000 * 1e6)
    assert load.generator_us_per_message == pytest.approx((1.0 + 9.5) / 10_000_000 * 1e6)  # master and worker
    assert load.saturated == "both"
    assert "the Locust processes spent 1.05 us of CPU per message" in describe(load)


def test_only_the_samples_within_the_phase_count():
    run = samples(line(0.0, 0.0, 0, locust=0.0), line(10.0, 1.0, 100, locust=1.0),
                  line(11.0, 1.95, 200, locust=1.1), line(20.0, 1.95, 200, locust=1.1))
    load = phase_load(run, 10.0, 11.0)
    assert load.backbone_busiest == pytest.approx(0.95) and load.saturated == "backbone"


@pytest.mark.parametrize("lines", [
    [],
    [line(5.0, 1.0, 10, locust=1.0)],  # one sample: no interval
    [line(5.0, 1.0, 10, locust=1.0), line(5.0, 2.0, 20, locust=2.0)],  # no time between them
])
def test_too_few_samples_say_unknown_rather_than_guess(lines):
    load = phase_load(samples(*lines), 0.0, 10.0)
    assert load == PhaseLoad(None, None, None, "unknown")
    assert "not known" in describe(load)


def test_without_the_backbones_metrics_a_saturated_generator_is_still_named():
    run = samples(line(0.0, None, None, locust=0.0), line(5.0, None, None, locust=4.9))
    assert phase_load(run, 0.0, 5.0).saturated == "load generator"
    idle = samples(line(0.0, None, None, locust=0.0), line(5.0, None, None, locust=1.0))
    load = phase_load(idle, 0.0, 5.0)
    assert load.saturated == "unknown" and load.backbone_us_per_message is None


def test_neither_side_busy():
    run = samples(line(0.0, 0.0, 0, locust=0.0), line(10.0, SATURATED * 10 - 0.5, 1000, locust=2.0))
    load = phase_load(run, 0.0, 10.0)
    assert load.saturated == "neither" and "neither side saturated" in describe(load)


def test_a_host_whose_cores_are_all_busy_is_the_limit_when_no_process_is():
    # two cores for 10 s: the backbone at 45 % and two Locust workers at 70 % of a core, the kernel's softirq the rest
    first = line(0.0, 0.0, 0, host=host(0.0, 0.0), **{"locust-worker-1": 0.0, "locust-worker-2": 0.0})
    last = line(10.0, 4.5, 10_000_000, host=host(19.0, 1.0), **{"locust-worker-1": 7.0, "locust-worker-2": 7.0})
    load = phase_load(samples(first, last), 0.0, 10.0)
    assert load.host_busy == pytest.approx(0.95) and load.host_busy >= HOST_SATURATED
    assert load.saturated == "host"
    assert "this host's cores saturated" in describe(load) and "host 95% busy" in describe(load)


def test_a_saturated_process_is_named_before_a_busy_host():
    first = line(0.0, 0.0, 0, host=host(0.0, 0.0), locust=0.0)
    last = line(10.0, 9.0, 10_000_000, host=host(19.5, 0.5), locust=9.0)
    assert phase_load(samples(first, last), 0.0, 10.0).saturated == "both"


def test_a_host_with_idle_cores_is_not_the_limit_and_older_files_without_its_times_still_judge():
    first = line(0.0, 0.0, 0, host=host(0.0, 0.0), locust=0.0)
    last = line(10.0, 4.0, 1000, host=host(12.0, 8.0), locust=6.0)
    load = phase_load(samples(first, last), 0.0, 10.0)
    assert load.host_busy == pytest.approx(0.6) and load.saturated == "neither"
    older = phase_load(samples(line(0.0, 0.0, 0, locust=0.0), line(10.0, 4.0, 1000, locust=6.0)), 0.0, 10.0)
    assert older.host_busy is None and older.saturated == "neither" and "host - busy" in describe(older)


def test_a_process_that_appeared_or_went_away_during_the_phase_is_left_out():
    first = line(0.0, 0.0, 0, locust=0.0)
    last = line(10.0, 1.0, 1000, **{"locust": 1.0, "locust-worker-2": 9.9})
    assert phase_load(samples(first, last), 0.0, 10.0).generator_busiest == pytest.approx(0.1)


def test_a_counter_that_did_not_move_gives_no_cost_per_message():
    run = samples(line(0.0, 0.0, 500, locust=0.0), line(10.0, 1.0, 500, locust=1.0))
    assert phase_load(run, 0.0, 10.0).backbone_us_per_message is None


def test_lines_that_are_not_samples_are_left_out():
    good = json.dumps(line(1.0, 2.0, 3, locust=4.0))
    lines = [good, good[:-5], "", "[]", "{}", '{"t": "soon"}', '{"t": 1, "metrics": [1]}',
             '{"t": 1, "metrics": {"fyrehose_process_cpu_seconds_total": "x"}}', '{"t": NaN}',
             '{"t": 2, "generator_cpu_seconds": {"locust": true}}', '{"t": 2, "host_cpu_seconds": {"idle": "x"}}',
             "\x00\xff", '{"t": ' + "9" * 400 + "}",
             "[" * 100_000 + "]" * 100_000, good]
    assert read_samples(lines) == [Sample(1.0, {'{process="backbone"}': 2.0}, 3.0, {"locust": 4.0}, {})] * 2


@given(st.lists(st.one_of(st.text(max_size=80), st.builds(json.dumps, st.recursive(
    st.none() | st.booleans() | st.floats() | st.integers() | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(
        ["t", "metrics", "generator_cpu_seconds", "host_cpu_seconds", BACKBONE, "locust", "fyrehose_pushes_total",
         "idle", "user"]), inner, max_size=4),
    max_leaves=12))), max_size=20))
@settings(max_examples=300, deadline=None)
def test_any_lines_read_without_crashing_and_phase_loads_follow(lines):
    samples = read_samples(lines)
    load = phase_load(samples, -1e300, 1e300)
    assert load.saturated in {"backbone", "load generator", "both", "host", "neither", "unknown"}
