"""The machine's busy share, as the benchmark and the load test both judge a host whose cores ran out."""
from __future__ import annotations

import subprocess
import sys
import time

import psutil
import pytest

from fyrehose.runtime.machine_cpu import busy_share, process_cpu_seconds


def test_idle_and_iowait_are_idle_and_guest_time_is_not_counted_twice():
    before = {"user": 10.0, "nice": 0.0, "system": 5.0, "idle": 100.0, "iowait": 1.0, "softirq": 0.0,
              "guest": 2.0, "guest_nice": 0.0}
    after = {"user": 16.0, "nice": 0.0, "system": 7.0, "idle": 110.0, "iowait": 2.0, "softirq": 1.0,
             "guest": 5.0, "guest_nice": 1.0}
    # busy: user 6 + system 2 + softirq 1 = 9; idle: 10 + 1 = 11; guest (in user already) left out
    assert busy_share(before, after) == pytest.approx(9 / 20)


def test_no_time_between_the_readings_is_no_busy_time():
    same = {"user": 1.0, "idle": 1.0}
    assert busy_share(same, same) == 0.0
    assert busy_share({}, {}) == 0.0


def test_a_field_only_one_reading_has_is_left_out():
    assert busy_share({"user": 0.0, "idle": 0.0}, {"user": 3.0, "idle": 1.0, "steal": 50.0}) == pytest.approx(0.75)


def test_real_readings_of_this_machine_around_busy_work_give_a_busy_share():
    before = psutil.cpu_times()._asdict()
    spent = time.process_time() + 0.1
    for _ in range(10_000):  # this process keeps a core busy for 0.1 CPU s: the machine was not idle throughout
        if time.process_time() >= spent:
            break
        sum(range(100_000))
    assert time.process_time() >= spent, "0.1 CPU s of work never added up"
    share = busy_share(before, psutil.cpu_times()._asdict())
    assert 0.0 < share <= 1.0


def test_each_process_reads_its_cpu_seconds_and_one_that_ended_is_left_out():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    gone = psutil.Process(child.pid)
    child.wait(30)  # reaped: its PID no longer names it
    seconds = process_cpu_seconds({"me": psutil.Process(), "gone": gone})
    assert set(seconds) == {"me"} and seconds["me"] > 0


def test_the_metrics_read_their_own_process_cpu_finer_than_a_tick():
    """Between two scrapes at a low rate a backbone may spend under one 10 ms tick: its own CPU comes from its clock."""
    from fyrehose.runtime.metrics import process_metrics

    def own_cpu() -> float:
        (_, _, _, [(labels, seconds)]), _ = process_metrics({"backbone": psutil.Process()})
        assert labels == {"process": "backbone"}
        return seconds

    before = own_cpu()
    spin_until = time.process_time() + 0.002  # 2 ms of CPU: a fifth of a tick
    while time.process_time() < spin_until:
        pass
    assert 0.002 <= own_cpu() - before < 0.5
