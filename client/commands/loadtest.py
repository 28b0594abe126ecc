"""``fyrehose loadtest``: runs Locust against a backbone and writes the capacity results.

The driver of the whole run: it starts a private backbone when none is given,
samples the backbone's metrics and the Locust processes' CPU, starts Locust
(one process, or a master and K workers) on the locustfile of this package,
waits, adds to the results which side ran out of CPU in each phase, prints
the capacity summary, and stops every process it started by its PID, also
when interrupted.
"""
from __future__ import annotations

import argparse
import json
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING

import fyrehose.loadtest
from fyrehose.errors import CommandFailed, InputError
from fyrehose.loadtest.results import render
from fyrehose.loadtest.saturation import annotate, read_samples
from fyrehose.loadtest.settings import LoadSettings, add_setting_arguments
from fyrehose.runtime.durable import replace_atomically
from fyrehose.runtime.process import ChildProcess
from fyrehose.runtime.readiness import free_port

if TYPE_CHECKING:
    from fyrehose.loadtest.sampler import MetricsSampler

LOCUSTFILE = Path(fyrehose.loadtest.__file__).with_name("locustfile.py")  # in the loadtest package, not here
LOOPBACK = "127.0.0.1"
STARTUP_TIMEOUT = 10.0  # seconds for the private backbone to answer, and for Locust workers to connect
PROBE_TIMEOUT = 3.0  # seconds a given backbone has to answer a KEEPALIVE before the run is refused
STOP_TIMEOUT = 15.0  # seconds a process gets to exit after being signalled, before it is killed
WEB_POLL = 0.5


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--backbone", metavar="HOST:PORT",
                        help="the backbone to load (default: start a private one on loopback and stop it after)")
    parser.add_argument("--metrics-url", metavar="URL",
                        help="the backbone's Prometheus endpoint to sample once a second "
                             "(default: the private backbone's; none with --backbone)")
    add_setting_arguments(parser, skip=("backbone", "out", "workers"))
    parser.add_argument("--web", action="store_true",
                        help="serve Locust's web UI while the test runs (and after it, until Ctrl-C)")
    parser.add_argument("--web-port", type=int, default=8089, metavar="PORT",
                        help="port of the web UI on 127.0.0.1 (default 8089)")
    parser.add_argument("--workers", type=int, default=0, metavar="K",
                        help="run Locust distributed: a master and K worker processes (default 0: one process)")
    parser.add_argument("--out", default="loadtest-results", metavar="DIR",
                        help="results directory (default ./loadtest-results)")


def _start(argv: list[str], log: Path, stack: ExitStack,
           stop: Callable[[ChildProcess], object] = lambda child: child.stop(STOP_TIMEOUT)) -> subprocess.Popen:
    """Start ``argv`` logging to ``log``; ``stack`` stops it by its PID with ``stop`` (default: SIGTERM, then
    SIGKILL)."""
    child = ChildProcess(argv, log)
    stack.callback(stop, child)
    return child.proc


def _interrupt_twice(out: Path) -> Callable[[ChildProcess], None]:
    """How the web UI's Locust master stops: it writes its HTML report when interrupted, but while an
    autostarted test runs the first interrupt only ends the test (the run then writes summary.json) and leaves
    the UI up; the second, sent once that is done (a fixed pause lost the report on a busy host), quits."""
    def stop(child: ChildProcess) -> None:
        if child.alive():
            child.proc.send_signal(signal.SIGINT)
            deadline = time.monotonic() + STOP_TIMEOUT
            while child.alive() and not (out / "summary.json").exists() and time.monotonic() < deadline:
                time.sleep(WEB_POLL)
        child.stop(signals=((signal.SIGINT, STOP_TIMEOUT),))

    return stop


def _wait_for_backbone(address: str, timeout: float, process: subprocess.Popen | None = None) -> None:
    from fyrehose.drivers.client import BackboneUnreachable, Client

    try:
        with Client(address, subscribe=False, unreachable_after=timeout):
            return
    except BackboneUnreachable:
        if process is not None and process.poll() is not None:
            raise CommandFailed(f"the backbone exited with status {process.returncode} before serving") from None
        raise


def _last_error(log: Path) -> str:
    lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    errors = [line for line in lines if "Error" in line or "error" in line]
    return (errors or lines or ["(empty log)"])[-1].strip()


def _read_results(out: Path) -> tuple[dict, list[dict]]:
    """The summary and the phases Locust wrote, with each phase's load (CPU of both sides) added to the files."""
    summary = json.loads((out / "summary.json").read_text())
    steps = [json.loads(line) for line in (out / "steps.jsonl").read_text().splitlines() if line]
    metrics = out / "metrics.jsonl"
    lines = metrics.read_text().splitlines() if metrics.exists() else []
    annotate(summary, steps, read_samples(lines))
    replace_atomically(out / "steps.jsonl", "".join(json.dumps(step) + "\n" for step in steps).encode())
    replace_atomically(out / "summary.json", (json.dumps(summary, indent=2) + "\n").encode())
    return summary, steps


def _settings(args: argparse.Namespace, out: Path) -> LoadSettings:
    """The validated settings; without --backbone, the address the private backbone will listen on."""
    from fyrehose.net.addresses import parse_hostport

    if args.backbone:
        host, port = parse_hostport(args.backbone)
    else:
        host, port = LOOPBACK, free_port(socket.SOCK_DGRAM)
    settings = LoadSettings.from_namespace(
        argparse.Namespace(**{**vars(args), "backbone": f"{host}:{port}", "out": str(out.resolve())}))
    settings.validate()
    if not 0 < args.web_port <= 65535:
        raise InputError("--web-port must be in 1..65535")
    if args.metrics_url and not args.metrics_url.startswith(("http://", "https://")):
        raise InputError("--metrics-url must be an http:// or https:// URL")
    return settings


def run(args: argparse.Namespace) -> int:
    out = Path(args.out)
    settings = _settings(args, out)
    out.mkdir(parents=True, exist_ok=True)
    for stale in ("summary.json", "steps.jsonl", "metrics.jsonl"):
        (out / stale).unlink(missing_ok=True)
    # Ctrl-C and SIGTERM both end the run cleanly.  Setting SIGINT too matters when this process was started
    # with SIGINT ignored (a background job of a script): the Locust processes would inherit that and
    # could not be interrupted into writing their report.
    previous = {sig: signal.signal(sig, signal.default_int_handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        printed = _run_processes(settings, args, out)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if args.web and (printed or not (out / "summary.json").exists()):
        return 0
    summary, steps = _read_results(out)
    print(render(summary, steps))
    print(f"results: {out}/ (locust_*.csv, report.html, metrics.jsonl, steps.jsonl, summary.json)")
    if not args.web and summary["requests"] == summary["failures"]:
        raise CommandFailed(f"no publish was confirmed by the backbone at {settings.backbone} "
                           f"(see {out / 'locust.log'})")
    return 0


def _run_processes(settings: LoadSettings, args: argparse.Namespace, out: Path) -> bool:
    """Start the backbone (unless given), the sampler and Locust; wait for the run; stop them all.

    True when the summary was already printed (web mode prints it as soon as the run ends).
    """
    from fyrehose.loadtest.sampler import MetricsSampler

    with ExitStack() as stack:
        metrics_url = args.metrics_url
        if args.backbone:
            _wait_for_backbone(settings.backbone, PROBE_TIMEOUT)
        else:
            state = stack.enter_context(tempfile.TemporaryDirectory(prefix="fyrehose-loadtest-"))
            metrics_port = free_port(socket.SOCK_STREAM)
            metrics_url = f"http://{LOOPBACK}:{metrics_port}/metrics"
            backbone = _start([
                sys.executable, "-m", "fyrehose.commands.main", "backbone", "--listen", settings.backbone,
                "--workers", "0", "--state-dir", state, "--metrics", f"{LOOPBACK}:{metrics_port}",
            ], out / "backbone.log", stack)
            _wait_for_backbone(settings.backbone, STARTUP_TIMEOUT, backbone)
        sampler = MetricsSampler(metrics_url, out / "metrics.jsonl").start()
        stack.callback(sampler.stop)
        master = _start_locust(settings, args, out, stack, sampler)
        stack.callback(_ignore_interrupts)  # runs first on the way out: a second Ctrl-C must not cut cleanup short
        if args.web:
            return _serve_web(master, args, out)
        status = master.wait()
        if not (out / "summary.json").exists():
            raise CommandFailed(f"Locust exited with status {status} without results: "
                               f"{_last_error(out / 'locust.log')} (log: {out / 'locust.log'})")
        return False


def _ignore_interrupts() -> None:
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)


def _start_locust(settings: LoadSettings, args: argparse.Namespace, out: Path, stack: ExitStack,
                  sampler: MetricsSampler) -> subprocess.Popen:
    """Workers first (they retry until the master listens), so that cleanup stops the master before them;
    ``sampler`` samples the CPU of each."""
    locust = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE)]
    master_args = [
        "--csv", str(out / "locust"), "--csv-full-history", "--html", str(out / "report.html"),
        "--exit-code-on-error", "0", "--host", f"udp://{settings.backbone}",  # the host shown in the reports
    ]
    if args.workers:
        master_port = free_port(socket.SOCK_STREAM)
        for index in range(args.workers):
            worker = _start(locust + ["--worker", "--master-host", LOOPBACK, "--master-port", str(master_port)]
                            + settings.to_locust_argv(), out / f"locust-worker-{index + 1}.log", stack)
            sampler.watch(f"locust-worker-{index + 1}", worker.pid)
        master_args += ["--master", "--master-bind-host", LOOPBACK, "--master-bind-port", str(master_port),
                        "--expect-workers", str(args.workers), "--expect-workers-max-wait", str(int(STARTUP_TIMEOUT))]
    if args.web:
        master_args += ["--web-host", LOOPBACK, "--web-port", str(args.web_port), "--autostart"]
    else:
        master_args += ["--headless"]
    # Locust writes its HTML report when interrupted (not on SIGTERM).
    interrupt = _interrupt_twice(out) if args.web else lambda child: child.stop(signals=((signal.SIGINT, STOP_TIMEOUT),))
    master = _start(locust + master_args + settings.to_locust_argv(), out / "locust.log", stack, interrupt)
    sampler.watch("locust", master.pid)
    return master


def _serve_web(master: subprocess.Popen, args: argparse.Namespace, out: Path) -> bool:
    """Keep the UI up until Ctrl-C (or SIGTERM); print the summary as soon as the run has written it."""
    print(f"Locust web UI: http://{LOOPBACK}:{args.web_port}/ (the test starts by itself; Ctrl-C to stop)",
          file=sys.stderr, flush=True)
    printed = False
    try:
        while master.poll() is None:
            if not printed and (out / "summary.json").exists():
                print(render(*_read_results(out)), flush=True)
                printed = True
            time.sleep(WEB_POLL)
    except KeyboardInterrupt:
        return printed
    raise CommandFailed(f"Locust exited with status {master.returncode}: {_last_error(out / 'locust.log')}")
