"""``fyrehose loadtest`` end to end: real Locust processes, real backbones over loopback, a real browser.

Every run is short and slow on purpose (tens of messages per second): these
tests check what the command produces, never how fast anything is.
"""
from __future__ import annotations

import csv
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

import fyrehose.loadtest
from fyrehose.runtime.process import ChildProcess

from support import FYREHOSE, LOOPBACK, free_port, run_cli

RUN_TIMEOUT = 90.0
STEP_FIELDS = {"t_start", "t_end", "offered_rate", "delivered_rate", "loss_before_recovery",
               "loss_after_recovery", "p50_ms", "p99_ms"}
SUMMARY_FIELDS = {"max_sustained_rate", "loss_before_recovery", "loss_after_recovery", "p50_ms", "p99_ms",
                  "requests", "failures", "shape", "users", "duration_s", "backbone"}
LOCUST_FILES = ["locust_stats.csv", "locust_stats_history.csv", "locust_failures.csv", "locust_exceptions.csv",
                "report.html", "metrics.jsonl", "steps.jsonl", "summary.json"]


def exit_status(child: ChildProcess) -> int:
    """``child``'s exit status once it ends by itself, or -1 if it is still running after ``RUN_TIMEOUT`` (hung:
    leaving its ``with`` block SIGTERMs it, which stops what it started)."""
    try:
        return child.proc.wait(RUN_TIMEOUT)
    except subprocess.TimeoutExpired:
        return -1


def loadtest(log: Path, *args: str) -> tuple[int, str]:
    """Run ``fyrehose loadtest`` to the end; its exit status and its output (stdout and stderr, in ``log``)."""
    with ChildProcess(FYREHOSE + ["loadtest", *args], log) as command:
        code = exit_status(command)
    return code, command.output()


def read_jsonl(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def stats_rows(out) -> dict[tuple[str, str], dict]:
    with open(out / "locust_stats.csv", newline="") as stats:
        return {(row["Type"], row["Name"]): row for row in csv.DictReader(stats)}


def test_a_short_run_writes_every_result_and_loses_nothing(tmp_path):
    out = tmp_path / "out"
    code, output = loadtest(tmp_path / "loadtest.log", "--shape", "step", "--step-time", "2", "--duration", "4",
                            "--rate", "40", "--users", "2", "--drain", "1", "--out", str(out))
    assert code == 0, output
    assert "max sustained rate" in output
    for name in LOCUST_FILES:
        assert (out / name).exists(), name

    rows = stats_rows(out)
    assert int(rows[("PUSH", "publish")]["Request Count"]) > 0
    assert int(rows[("DELIVER", "publish-to-deliver")]["Request Count"]) > 0
    assert "PUSH" in (out / "report.html").read_text()

    summary = json.loads((out / "summary.json").read_text())
    assert SUMMARY_FIELDS <= set(summary)
    assert (summary["shape"], summary["users"], summary["duration_s"]) == ("step", 2, 4)
    assert summary["backbone"].startswith(LOOPBACK + ":") and summary["complete"] and summary["workers"] == 0
    assert summary["requests"] > 0 and summary["requests"] == int(rows[("PUSH", "publish")]["Request Count"])
    assert summary["messages_expected"] > 0
    assert summary["loss_after_recovery"] == 0 and summary["messages_lost_after_recovery"] == 0

    steps = read_jsonl(out / "steps.jsonl")
    assert [step["offered_rate"] for step in steps] == [40, 80]
    assert all(STEP_FIELDS <= set(step) for step in steps)
    assert all(step["delivered_rate"] > 0 and step["loss_after_recovery"] == 0 for step in steps)
    assert steps[0]["t_end"] == steps[1]["t_start"]

    samples = read_jsonl(out / "metrics.jsonl")
    assert len(samples) >= 2
    assert all(isinstance(sample["t"], float) for sample in samples)
    assert samples[-1]["metrics"]["fyrehose_pushes_total"] >= summary["requests"] - summary["failures"]
    assert "fyrehose backbone stopped" in (out / "backbone.log").read_text()  # stopped cleanly, by the command
    # which side ran out of CPU: both sides sampled, the Locust process by the command itself (while it runs: a
    # sample taken after it exited, which a busy machine can make the last one, leaves it out)
    assert any(sample["generator_cpu_seconds"].get("locust", 0) > 0 for sample in samples), samples
    loads = [step["load"] for step in steps if step["load"]["saturated"] != "unknown"]
    assert loads, steps  # 2 s phases, sampled every second
    assert all(load["backbone_busiest"] >= 0 and load["generator_busiest"] >= 0 for load in loads)
    assert all(load["backbone_us_per_message"] > 0 for load in loads)
    assert all(0.0 <= load["host_busy"] <= 1.0 for load in loads)  # and the host's cores, from its CPU times
    assert {"user", "system", "idle"} <= set(samples[-1]["host_cpu_seconds"])
    # every step sustained, or the one that was not is put down to this host's cores (40 and 80 messages/s: only a
    # machine busy with other work can fail to sustain them, and the run must say so)
    assert summary["limit"] is None or summary["limit"]["saturated"] == "host", summary["limit"]


def test_batched_publishers_count_requests_and_messages_and_lose_nothing(tmp_path, backbone_factory):
    backbone = backbone_factory(workers=0)
    out = tmp_path / "out"
    code, output = loadtest(tmp_path / "loadtest.log", "--backbone", backbone.address, "--workers", "1",
                            "--batch", "50", "--rate", "2000", "--duration", "3", "--users", "2", "--drain", "1",
                            "--out", str(out))
    assert code == 0, output
    assert "publishing batches of 50" in output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["batch"] == 50 and summary["complete"]
    assert summary["messages"] == 50 * summary["requests"] and summary["message_failures"] == 0
    assert summary["loss_after_recovery"] == 0 and summary["messages_expected"] >= summary["messages"]  # 2 subscribers
    assert int(stats_rows(out)[("PUSH", "publish x50")]["Request Count"]) == summary["requests"]
    (step,) = read_jsonl(out / "steps.jsonl")
    seconds = step["t_end"] - step["t_start"]
    confirmed = summary["messages"] - summary["message_failures"]
    assert step["confirmed_rate"] * seconds == pytest.approx(confirmed, rel=1e-9)  # messages, not requests
    assert backbone.metric("fyrehose_pushes_total") >= summary["messages"]
    # no metrics URL: the backbone's CPU is not known, the Locust processes' still is
    samples = read_jsonl(out / "metrics.jsonl")
    assert samples and all(sample["metrics"] == {} for sample in samples)
    assert {"locust", "locust-worker-1"} <= set(samples[-1]["generator_cpu_seconds"])
    assert step["load"]["backbone_busiest"] is None and step["load"]["backbone_us_per_message"] is None


def test_distributed_run_against_a_given_backbone_stops_at_the_first_failed_step(tmp_path, backbone_factory):
    backbone = backbone_factory(workers=0)  # one backbone mode is enough: this tests the load test
    out = tmp_path / "out"
    metrics_url = f"http://{LOOPBACK}:{backbone.metrics_port}/metrics"
    # No publish-to-confirm round trip is under a microsecond: the first step must fail, and the run stop.
    code, output = loadtest(tmp_path / "loadtest.log", "--backbone", backbone.address, "--metrics-url", metrics_url,
                            "--workers", "1", "--shape", "step", "--step-time", "2", "--duration", "60",
                            "--rate", "40", "--p99-ms", "0.001", "--drain", "1", "--out", str(out))
    assert code == 0, output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["complete"] and summary["workers"] == 1
    steps = read_jsonl(out / "steps.jsonl")
    assert 1 <= len(steps) == summary["phases"] < 60 // 2  # cut short, well before the 30 steps of --duration 60
    assert summary["max_sustained_rate"] == 0
    assert summary["first_unsustained_phase"]["name"] == "step 1"
    assert any("p99" in reason for reason in summary["first_unsustained_phase"]["reasons"])
    assert summary["requests"] > 0 and summary["messages_expected"] > 0
    assert backbone.metric("fyrehose_pushes_total") >= summary["requests"] - summary["failures"]
    assert read_jsonl(out / "metrics.jsonl")
    assert int(stats_rows(out)[("PUSH", "publish")]["Request Count"]) == summary["requests"]
    assert (out / "locust-worker-1.log").exists()
    assert summary["limit"] == read_jsonl(out / "steps.jsonl")[0]["load"]  # the load of the step that broke
    assert "at step 1, the limit: " in output


def test_the_documented_master_and_worker_commands_add_the_workers_up(tmp_path, backbone_factory):
    """docs/loadtest.md's commands for a run across hosts, here on one: Locust's own master and workers, started
    by hand with the same settings, judged by the master on every worker's tally."""
    backbone = backbone_factory(workers=0)
    locustfile = str(Path(fyrehose.loadtest.__file__).parent / "locustfile.py")
    out = tmp_path / "out"
    port = str(free_port())
    settings = ["--fyrehose-backbone", backbone.address, "--fyrehose-batch", "20", "--fyrehose-shape", "step",
                "--fyrehose-rate", "400", "--fyrehose-step-time", "2", "--fyrehose-duration", "4",
                "--fyrehose-drain", "1"]
    locust = [sys.executable, "-m", "locust", "-f", locustfile]
    with ChildProcess(locust + ["--master", "--headless", "--expect-workers", "2", "--master-bind-host", LOOPBACK,
                                "--master-bind-port", port, *settings, "--fyrehose-out", str(out)],
                      tmp_path / "master.log") as master, \
            ChildProcess(locust + ["--worker", "--master-host", LOOPBACK, "--master-port", port, *settings],
                         tmp_path / "worker-1.log"), \
            ChildProcess(locust + ["--worker", "--master-host", LOOPBACK, "--master-port", port, *settings],
                         tmp_path / "worker-2.log"):
        assert exit_status(master) == 0, master.output()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["complete"] and summary["workers"] == 2
    assert summary["requests"] > 0 and summary["messages"] == 20 * summary["requests"]
    # both subscribers, wherever they ran (one that subscribed after the first phase began, on a loaded host,
    # expects only what was sequenced from its first message on)
    assert summary["messages"] < summary["messages_expected"] <= 2 * summary["messages"]
    assert summary["loss_after_recovery"] == 0
    steps = read_jsonl(out / "steps.jsonl")
    assert [step["offered_rate"] for step in steps] == [400, 800]
    confirmed = summary["messages"] - summary["message_failures"]
    assert sum(step["confirmed_rate"] * (step["t_end"] - step["t_start"]) for step in steps) == pytest.approx(
        confirmed, rel=1e-9)
    # every message the backbone sequenced was counted by one of the two workers, and the master added both up
    assert confirmed <= backbone.metric("fyrehose_pushes_total") <= summary["messages"]


@pytest.mark.parametrize("args", [
    ["--rate", "0"],
    ["--users", "0"],
    ["--size", "4"],
    ["--shape", "zigzag"],
    ["--timeout", "60"],
    ["--backbone", "nowhere"],
    ["--web-port", "70000"],
    ["--metrics-url", "ftp://x"],
])
def test_bad_arguments_give_one_line_and_nonzero_exit(args, tmp_path):
    result = run_cli("loadtest", "--out", str(tmp_path / "out"), *args)
    assert result.returncode != 0
    lines = result.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and "error" in lines[0], lines
    assert not (tmp_path / "out").exists()  # refused before anything started


def test_an_unreachable_backbone_is_one_line(tmp_path):
    result = run_cli("loadtest", "--backbone", f"{LOOPBACK}:{free_port()}", "--out", str(tmp_path / "out"))
    assert result.returncode == 1
    lines = result.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and "no KEEPALIVE-ACK" in lines[0], lines


def test_help_lists_the_options():
    result = run_cli("loadtest", "--help")
    assert result.returncode == 0
    for option in (b"--backbone", b"--users", b"--rate", b"--duration", b"--shape", b"--web", b"--workers", b"--out"):
        assert option in result.stdout


def wait_for_push_stats(port: int, process: ChildProcess, timeout: float = 45.0) -> None:
    """Until Locust's UI serves statistics with a PUSH row (bounded in time)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.alive(), process.output()
        try:
            with urllib.request.urlopen(f"http://{LOOPBACK}:{port}/stats/requests", timeout=2) as response:
                stats = json.loads(response.read())
            if any(row["method"] == "PUSH" and row["num_requests"] for row in stats["stats"]):
                return
        except OSError:
            pass
        time.sleep(0.5)
    raise TimeoutError("Locust's web UI never showed PUSH statistics")


def test_the_web_ui_shows_the_push_statistics_in_a_real_browser(tmp_path):
    chromium = shutil.which("chromium")
    assert chromium, "chromium is missing: tools/bootstrap --test installs tools/test-packages.txt"
    out = tmp_path / "out"
    port = free_port(socket.SOCK_STREAM)
    command = ChildProcess(FYREHOSE + ["loadtest", "--web", "--web-port", str(port), "--duration", "60",
                                       "--rate", "40", "--users", "2", "--out", str(out)], tmp_path / "loadtest.log")
    try:
        wait_for_push_stats(port, command)
        browser = subprocess.Popen(
            [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={tmp_path / 'chromium'}", "--virtual-time-budget=10000", "--dump-dom",
             f"http://{LOOPBACK}:{port}/"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            dom, _ = browser.communicate(timeout=60)
        finally:
            if browser.poll() is None:
                os.killpg(browser.pid, signal.SIGKILL)  # the browser's group is led by its PID
                browser.wait(10)
        page = dom.decode()
        # the statistics table, rendered by the page's JavaScript: a row for PUSH publish with its request count
        row = re.search(r"<tr[^>]*><td[^>]*>PUSH</td><td[^>]*>publish</td><td[^>]*>(\d+)</td>", page)
        assert row, page[-3000:]
        assert int(row.group(1)) > 0
    finally:
        # Ctrl-C: the command stops Locust (which writes its report) and the backbone
        code = command.stop(signals=((signal.SIGINT, 30.0),))
    assert code == 0, command.output()
    assert "PUSH" in (out / "report.html").read_text()
    assert "fyrehose backbone stopped" in (out / "backbone.log").read_text()
