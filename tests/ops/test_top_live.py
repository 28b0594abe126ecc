"""fyrehose top against a live deployment: one screen as text (--once), its errors in one line, and the live view
in a real terminal (tmux: the keys sent, the screen captured), following what the deployment does."""
from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time

import pytest

from fyrehose import Client

from ops_support import Deployment
from support import EVENT_WITHIN, run_cli, wait_until


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    started = Deployment(tmp_path_factory.mktemp("top"))
    try:
        yield started.start()
    finally:
        started.stop()


def every_endpoint(deployment: Deployment) -> list[str]:
    return [endpoint for endpoints in deployment.endpoints().values() for endpoint in endpoints]


def rows(output: str) -> dict[str, list[str]]:
    """Each table row by its first cell (an endpoint) and section: ``{"backbones 127.0.0.1:9": [cells...]}``."""
    found, title = {}, ""
    for line in output.splitlines():
        cells = line.split()
        if line in ("backbones", "losses and recovery", "standby pair", "journals", "caches", "gateways", "not read"):
            title = line.strip()
        elif cells and re.match(r"\d+\.\d+\.\d+\.\d+:\d+$", cells[0]):
            found[f"{title} {cells[0]}"] = cells[1:]
    return found


def test_once_prints_every_process_of_the_deployment_as_text(deployment, tmp_path):
    dead = "127.0.0.1:9"  # the discard port: nothing listens there
    done = run_cli("top", "--once", "--interval", "0.5", *every_endpoint(deployment), dead)
    assert done.returncode == 0, done.stderr
    output = done.stdout.decode()
    assert "\x1b" not in output  # plain text for scripts: no escape sequences
    assert output.startswith("fyrehose top · ") and "7 endpoints, 1 not read" in output
    found = rows(output)
    a, b = deployment.a.metrics, deployment.b.metrics
    primary = found[f"backbones {a}"]
    assert primary[0] == "primary" and int(primary[1]) >= 51  # 50 messages, one through the gateway, sessions'
    assert found[f"backbones {b}"][0] == "standby"
    assert found[f"backbones 127.0.0.1:{deployment.pipeline.metrics_port}"][0] == "pipeline"
    assert found[f"standby pair {a}"][:3] == ["primary", "1", "attached"]
    standby = found[f"standby pair {b}"]
    assert standby[0] == "standby" and standby[2] == "-"  # its epoch is the one it follows, or its own parity's
    assert int(found[f"journals {deployment.journal_metrics}"][0]) >= 51
    assert int(found[f"caches {deployment.cache_metrics}"][0]) >= 51  # its position: it read the stream
    gateway = found[f"gateways {deployment.gateway_address}"]
    assert gateway[:2] == ["http", "up"] and int(gateway[3]) >= 51  # after the clients connected now
    assert "Connection refused" in " ".join(found[f"not read {dead}"])


def test_endpoints_come_from_a_config_file_too(deployment, tmp_path):
    config = tmp_path / "deployment.conf"
    config.write_text(f"# the journal and the gateway\n{deployment.journal_metrics}\n"
                      f"http://{deployment.gateway_address}/metrics   # the HTTP gateway's own port\n")
    done = run_cli("top", "--once", "--interval", "0", "--config", str(config), deployment.a.metrics)
    assert done.returncode == 0, done.stderr
    a = deployment.a.metrics
    assert set(rows(done.stdout.decode())) == {f"backbones {a}", f"losses and recovery {a}", f"standby pair {a}",
                                               f"journals {deployment.journal_metrics}",
                                               f"gateways {deployment.gateway_address}"}


@pytest.mark.parametrize("args, message", [
    (["--once", "backbone"], "endpoint 'backbone': expected HOST:PORT"),
    (["--once"], "no endpoint to read"),
    (["127.0.0.1:9100", "--interval", "0"], "--interval 0 is for --once only"),
    (["127.0.0.1:9100"], "the live view needs a terminal: use --once"),
    (["--once", "--config", "/nonexistent/deployment.conf"], "No such file"),
    (["--once", "--sort", "colour", "127.0.0.1:9"], "invalid choice"),
])
def test_bad_arguments_get_one_line_and_a_failing_exit(args, message):
    done = run_cli("top", *args)
    assert done.returncode in (1, 2) and done.stdout == b""
    assert message in done.stderr.decode() and done.stderr.decode().count("\n") == 1, done.stderr


class Tmux:
    """A tmux server of this test's own (its own socket), stopped by its PID."""

    def __init__(self, socket_path: str) -> None:
        self.socket = socket_path
        self.pid: int | None = None

    def __call__(self, *args: str) -> str:
        # pytest exports COLUMNS=80 and LINES=24; a terminal's size is the terminal's, as in a login shell
        environment = {name: value for name, value in os.environ.items() if name not in ("COLUMNS", "LINES")}
        return subprocess.run(["tmux", "-S", self.socket, *args], capture_output=True, text=True, timeout=20,
                              check=True, env=environment).stdout

    def start(self, command: list[str]) -> None:
        self("new-session", "-d", "-s", "top", "-x", "180", "-y", "50", shlex.join(command))
        self.pid = int(self("display-message", "-p", "-t", "top", "#{pid}"))

    def screen(self) -> str:
        return self("capture-pane", "-p", "-t", "top")

    def wait_screen(self, wanted, what: str, timeout: float = 30.0) -> str:
        deadline = time.monotonic() + timeout
        while True:
            text = self.screen()
            if wanted(text):
                return text
            assert time.monotonic() < deadline, f"{what}; the screen:\n{text}"
            time.sleep(0.2)

    def stop(self) -> None:
        if self.pid is not None:
            try:
                os.kill(self.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass


def test_the_live_view_in_a_terminal_follows_the_deployment_sorts_on_a_key_and_quits_on_another(deployment,
                                                                                                   tmp_path):
    tmux = Tmux(str(tmp_path / "tmux.sock"))
    try:
        tmux.start([sys.executable, "-m", "fyrehose.commands.main", "top", *every_endpoint(deployment)])
        primary = re.compile(rf"{re.escape(deployment.a.metrics)}\s+primary\s+([\d,]+)\s")

        def last_sequence(text: str) -> int:
            found = primary.search(text)
            return int(found.group(1).replace(",", "")) if found else 0

        first = tmux.wait_screen(lambda text: "standby pair" in text and "sorted by endpoint" in text
                                 and last_sequence(text) >= 51, "the first screen")
        with Client(deployment.a.address) as publisher:
            last = publisher.publish_many([b"more %d" % index for index in range(1000)])[-1]
        assert last >= last_sequence(first) + 1000
        screen = tmux.wait_screen(lambda text: last_sequence(text) >= last, f"the primary's last sequence at {last}")
        assert "s: sort by the next column" in screen and "journals" in screen and "gateways" in screen
        tmux("send-keys", "-t", "top", "s")
        tmux.wait_screen(lambda text: "sorted by rate" in text, "the sort key changed by s")
        tmux("send-keys", "-t", "top", "q")
        wait_until(lambda: subprocess.run(["tmux", "-S", tmux.socket, "has-session", "-t", "top"],
                                          capture_output=True, timeout=20).returncode != 0, EVENT_WITHIN, "top quit on q")
    finally:
        tmux.stop()
