"""A gateway target of ``fyrehose bench``: a single-process backbone and the gateway in front of it.

``redis-gateway`` and ``nats-gateway`` are measured exactly as ``redis`` and
``nats`` are, by the same load generators and scanners speaking RESP and the
NATS protocol to one TCP address; only what answers there differs.  The
stack looks like one server to the orchestrator: started and awaited
together (the gateway's readiness line, then the protocol's own answer),
stopped together by PID, and both processes' CPU time counted (the gateway
as ``server``, the backbone as ``server/backbone``).
"""
from __future__ import annotations

import socket
import sys
from pathlib import Path

import psutil

from fyrehose.runtime.process import ChildProcess
from fyrehose.runtime.readiness import free_port
from fyrehose.tools.bench.servers import LOOPBACK, START_TIMEOUT, STOP_TIMEOUT, ServerProcess
from fyrehose.tools.bench.targets import BenchError, Target


class GatewayStack(ServerProcess):
    """``fyrehose backbone --workers 0`` plus ``fyrehose gateway KIND`` on it; the gateway's address is the target's."""

    def __init__(self, target: Target, workdir: Path) -> None:
        backbone = f"{LOOPBACK}:{free_port(socket.SOCK_DGRAM)}"
        port = free_port(socket.SOCK_STREAM)
        assert target.gateway is not None  # the stack of a target served by a gateway
        command = [sys.executable, "-m", "fyrehose.commands.main", "gateway", target.gateway, "--listen", f"{LOOPBACK}:{port}",
                   "--backbone", backbone, "--max-clients", "4096", "--max-pending", str(1 << 30)]
        if target.gateway_workers > 1:
            command += ["--workers", str(target.gateway_workers)]
        super().__init__(target, command, (LOOPBACK, port), workdir)
        self.backbone_command = [sys.executable, "-m", "fyrehose.commands.main", "backbone", "--listen", backbone,
                                 "--workers", "0", "--state-dir", str(workdir / "state")]
        self.backbone: ChildProcess | None = None

    def start(self) -> GatewayStack:
        self.backbone = ChildProcess(self.backbone_command, self.workdir / "backbone.log", cwd=self.workdir)
        try:
            self.backbone.wait_ready(START_TIMEOUT)
        except Exception as exc:  # wait_ready killed it already; the bench reports one line
            raise BenchError(f"the backbone under the gateway did not start: {exc}") from None
        super().start()
        return self

    def alive(self) -> bool:
        return super().alive() and self.backbone is not None and self.backbone.alive()

    def processes(self) -> dict[str, psutil.Process]:
        found = super().processes()
        if self.backbone is not None and self.backbone.alive():
            try:
                found["server/backbone"] = psutil.Process(self.backbone.pid)
            except psutil.Error:
                pass
        return found

    def stop(self) -> None:
        super().stop()
        if self.backbone is not None:
            self.backbone.stop(STOP_TIMEOUT)
