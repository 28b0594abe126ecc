"""The Parquet export worker: a process of its own that exports the sealed segments the journal names.

Converting a segment to Parquet is per-message work; in the journal's process
it would compete for the interpreter with the recording path.  The journal
starts this worker once (``python -m fyrehose.journal.export_worker``) and
writes one request per line on its stdin, ``PATH<TAB>SIZE<TAB>ROOT``; the
worker answers each with one line on stdout, ``ok`` or ``error: ...``.  It
exits when its stdin closes, which also happens when the journal dies.
"""
from __future__ import annotations

import subprocess
import sys


def serve() -> None:
    from fyrehose.journal.parquet import export_segment

    for line in sys.stdin:
        try:
            path, size, root = line.rstrip("\n").split("\t")
            export_segment(path, int(size), root)
            answer = "ok"
        except Exception as exc:  # reported to the journal, which keeps the segment unexported
            answer = f"error: {exc}".replace("\n", " ")
        sys.stdout.write(answer + "\n")
        sys.stdout.flush()


class ExportWorker:
    """The journal's side: start the worker, have segments exported one at a time, stop it."""

    def __init__(self) -> None:
        self._process: subprocess.Popen[str] | None = None

    def export(self, path: str, size: int, root: str) -> None:
        """Export one segment in the worker; raises RuntimeError with the worker's reason when it fails."""
        if self._process is None or self._process.poll() is not None:
            self._process = subprocess.Popen([sys.executable, "-m", "fyrehose.journal.export_worker"],
                                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        process = self._process
        assert process.stdin is not None and process.stdout is not None
        try:
            process.stdin.write(f"{path}\t{size}\t{root}\n")
            process.stdin.flush()
            answer = process.stdout.readline().strip()
        except OSError as exc:
            answer = f"error: the export worker is gone ({exc})"
        if answer != "ok":
            raise RuntimeError(answer.removeprefix("error: ") or "the export worker exited")

    def close(self) -> None:
        if self._process is not None:
            if self._process.stdin is not None:
                self._process.stdin.close()
            try:
                self._process.wait(30)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
            self._process = None


if __name__ == "__main__":
    serve()
