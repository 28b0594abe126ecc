"""A long-running command whose worker thread died must not linger half-alive.

A client's receive thread is what sends KEEPALIVEs and reads DELIVERs: if it
ends, the process looks healthy to a supervisor while it journals or relays
nothing.  Every worker thread of the package runs through :func:`guarded`;
a command-line service calls :func:`exit_on_thread_death` once, after which
a thread that raises makes the process write one line naming it and exit
with :data:`EXIT_THREAD_DIED`, so the supervisor restarts it.  A script that
uses the library keeps Python's default: the traceback is printed and the
program goes on (its :class:`~fyrehose.Client` then reports the backbone
unreachable).
"""
from __future__ import annotations

import functools
import os
import sys
import threading
from collections.abc import Callable

EXIT_THREAD_DIED = 70  # EX_SOFTWARE

_exit_on_death = False
_command = "fyrehose"  # the command named in the one line


def exit_on_thread_death(command: str) -> None:
    """From now on, any thread of this process that dies ends the process (see the module doc)."""
    global _exit_on_death, _command
    _exit_on_death = True
    _command = command
    threading.excepthook = _report_and_exit


def guarded(target: Callable[[], None], name: str | None = None) -> Callable[[], None]:
    """``target`` for a worker thread or greenlet whose death must follow the process's policy.

    ``name`` is what the one line reports (default: the function's qualified name).
    """
    label: str = name if name else getattr(target, "__qualname__", repr(target))

    @functools.wraps(target)
    def run() -> None:
        try:
            target()
        except BaseException as exc:  # noqa: BLE001 - every way of dying is reported the same way
            if not _exit_on_death:
                raise
            _die(label, exc)

    return run


def _report_and_exit(args: threading.ExceptHookArgs) -> None:
    name = args.thread.name if args.thread is not None else "a thread"
    _die(name, args.exc_value if args.exc_value is not None else args.exc_type())


def _die(name: str, exc: BaseException) -> None:
    try:
        sys.stderr.write(f"fyrehose {_command}: error: thread {name} died: {type(exc).__name__}: {exc}\n")
        sys.stderr.flush()
    finally:
        os._exit(EXIT_THREAD_DIED)
