"""Child processes the benches, the load test and the tests start: started, awaited, stopped by PID.

One definition of the life cycle every long-running fyrehose command shares:
start it with its output in a log file, wait for its readiness line
(``fyrehose KIND listening on HOST:PORT``, see :mod:`fyrehose.runtime.readiness`),
and stop it with SIGTERM, then SIGKILL if it does not exit in time.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from fyrehose.errors import CommandFailed
from fyrehose.runtime.readiness import READY_LINE

FYREHOSE = [sys.executable, "-m", "fyrehose"]
STOP_TIMEOUT = 15.0  # seconds a process gets to exit after SIGTERM before it is killed
POLL = 0.05
T = TypeVar("T")


def wait_until(condition: Callable[[], T], timeout: float = 10.0, what: str = "the awaited condition",
               interval: float = POLL) -> T:
    """Poll ``condition`` until it returns something true, and return that.

    ``TimeoutError`` naming ``what`` after ``timeout`` seconds: a wait that
    runs out is a failure to report, never a silent False.
    """
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() >= deadline:
            raise TimeoutError(f"{what} did not happen within {timeout:g} s")
        time.sleep(interval)
    return value


class ChildProcess:
    """One child process with stdout and stderr in ``log``; ``stop``/``kill`` act on its PID only."""

    def __init__(self, argv: Sequence[str], log: Path, env: dict[str, str] | None = None,
                 cwd: Path | None = None) -> None:
        self.argv = list(argv)
        self.log = Path(log)
        with open(self.log, "ab") as output:
            self.proc = subprocess.Popen(self.argv, stdout=output, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=env, cwd=cwd)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def alive(self) -> bool:
        return self.proc.poll() is None

    def wait_ready(self, timeout: float = 30.0) -> tuple[str, int]:
        """The HOST:PORT of the readiness line, once printed; ``RuntimeError`` (after a kill) if none comes."""
        deadline = time.monotonic() + timeout
        while True:
            found = READY_LINE.search(self.output())
            if found:
                return found.group("host"), int(found.group("port"))
            if not self.alive() or time.monotonic() >= deadline:
                status = self.proc.poll()
                self.kill()
                tail = self.output()[-2000:]
                raise CommandFailed(f"{' '.join(self.argv[:6])} did not become ready "
                                   f"({'exit ' + str(status) if status is not None else 'timeout'}): {tail}")
            time.sleep(POLL)

    def stop(self, timeout: float = STOP_TIMEOUT, *,
             signals: Sequence[tuple[int, float]] | None = None) -> int | None:
        """SIGTERM and wait up to ``timeout`` s; SIGKILL if it is still there.  Its exit status.

        ``signals`` replaces the SIGTERM with (signal, seconds to wait) steps
        sent in turn (Locust writes its report on SIGINT, not on SIGTERM).
        """
        for sig, wait in signals or ((signal.SIGTERM, timeout),):
            if not self.alive():
                break
            os.kill(self.proc.pid, sig)
            try:
                return self.proc.wait(wait)
            except subprocess.TimeoutExpired:
                continue
        self.kill()
        return self.proc.returncode

    def kill(self) -> None:
        """SIGKILL (kill -9) and reap."""
        if self.alive():
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def __enter__(self) -> ChildProcess:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
