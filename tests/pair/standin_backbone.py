"""A stand-in for one backbone of a standby pair, for keepalived's tests: run as ``python standin_backbone.py DIR``.

Does what keepalived sees of the backbone: writes its pid and its role
(``standby``) into DIR as the backbone does (a temporary file renamed over the
old one), and on SIGUSR1 (promote) or SIGUSR2 (demote) switches its role to
``primary`` or ``standby``, unless a test wrote ``fenced`` there.  Each signal
is one line ``NAME MONOTONIC_SECONDS`` in DIR/signals.  Ends on SIGTERM.
"""
from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path


def replace(path: Path, text: str) -> None:
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(text)
    os.replace(temporary, path)


def main() -> None:
    state_dir = Path(sys.argv[1])
    replace(state_dir / "role", "standby\n")
    replace(state_dir / "pid", f"{os.getpid()}\n")
    record = open(state_dir / "signals", "a", buffering=1)

    def switch(number: int, _frame: object) -> None:
        record.write(f"{signal.Signals(number).name} {time.monotonic():.6f}\n")
        if (state_dir / "role").read_text().strip() != "fenced":
            replace(state_dir / "role", "primary\n" if number == signal.SIGUSR1 else "standby\n")

    signal.signal(signal.SIGUSR1, switch)
    signal.signal(signal.SIGUSR2, switch)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while True:
        signal.pause()


if __name__ == "__main__":
    main()
