"""fyrehose.runtime.readiness: free loopback ports and the one readiness line of every service (the backbone
start-up probe is a driver's: tests/drivers/test_backbone_io.py)."""
from __future__ import annotations

import socket
import time

import pytest

from fyrehose.runtime.readiness import LOOPBACK, free_port


@pytest.mark.parametrize("kind", [socket.SOCK_DGRAM, socket.SOCK_STREAM], ids=["udp", "tcp"])
def test_free_port_can_be_bound(kind):
    port = free_port(kind)
    assert 0 < port < 65536
    with socket.socket(socket.AF_INET, kind) as sock:
        sock.bind((LOOPBACK, port))


def _stdout_until_stopped(argv: list[str], log, timeout: float = 30.0) -> tuple[list[str], int | None]:
    """Every line the command prints on stdout from its start until it exits on SIGTERM, sent half a second after
    its first line (stderr goes to ``log``), and its exit status."""
    import os
    import selectors
    import signal
    import subprocess

    with open(log, "wb") as errors:
        # unbuffered: readline takes the first line only, the rest is left for communicate (which reads the pipe)
        process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=errors, stdin=subprocess.DEVNULL, bufsize=0)
    try:
        with selectors.DefaultSelector() as selector:
            selector.register(process.stdout, selectors.EVENT_READ)
            first = process.stdout.readline().decode() if selector.select(timeout) else ""
        time.sleep(0.5)  # serving for a while: a line printed after the readiness line would be out by now
        os.kill(process.pid, signal.SIGTERM)
        rest, _ = process.communicate(timeout=30)
        return [first] + rest.decode().splitlines(keepends=True), process.returncode
    finally:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
            process.wait()
        process.stdout.close()


@pytest.mark.parametrize("kind, extra", [
    ("backbone", ["--state-dir", "{tmp}/state"]),
    ("journal", ["--backbone", "{backbone}", "--dir", "{tmp}/journal", "--no-parquet"]),
    ("cache", ["--backbone", "{backbone}"]),
    ("gateway redis", ["--backbone", "{backbone}", "--listen", "127.0.0.1:0"]),
    ("gateway nats", ["--backbone", "{backbone}", "--listen", "127.0.0.1:0"]),
    ("gateway marlin", ["--backbone", "{backbone}", "--listen", "127.0.0.1:0"]),
    ("gateway lumberjack", ["--backbone", "{backbone}", "--listen", "127.0.0.1:0"]),
])
def test_every_service_prints_one_readiness_line_on_stdout(kind, extra, backbone_factory, tmp_path):
    from fyrehose.runtime.readiness import READY_LINE

    from support import FYREHOSE

    argv = FYREHOSE + kind.split()
    if kind == "backbone":
        argv += ["--listen", f"{LOOPBACK}:{free_port()}"]
    else:
        backbone = backbone_factory()
    argv += [arg.format(tmp=tmp_path, backbone=backbone.address if kind != "backbone" else "") for arg in extra]
    lines, status = _stdout_until_stopped(argv, tmp_path / "stderr.log")
    assert len(lines) == 1, (lines, (tmp_path / "stderr.log").read_text())  # the whole of stdout, start to exit
    found = READY_LINE.match(lines[0])
    assert found, (lines, (tmp_path / "stderr.log").read_text())
    assert found.group("kind") == kind and int(found.group("port")) > 0 and lines[0].endswith(")\n")
    assert status == 0, (tmp_path / "stderr.log").read_text()
