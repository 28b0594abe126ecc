"""The one command line, ``fyrehose <command>``.

Each command lives in its own module of :mod:`fyrehose.commands`, with
``add_arguments(parser)`` and ``run(args) -> int``; those modules import their
heavy dependencies inside ``run`` so that every command starts fast.

A user error ends the process with one line on stderr and exit 1: the
project's own errors (:class:`~fyrehose.errors.FyrehoseError`; a command
raises :class:`~fyrehose.errors.InputError` for bad input and
:class:`~fyrehose.errors.CommandFailed` for a failure it explains), argparse's,
a malformed frame or envelope, an ``OSError`` that describes the environment
(a missing file, a refused permission, an address in use, a full disk, a
network that does not answer) and an optional extra that is not installed.
Anything else is a bug, and is not disguised as the user's mistake: it prints
a traceback and exits with :data:`EXIT_INTERNAL`.  ``--debug`` (or
``FYREHOSE_DEBUG=1``) prints the traceback of every error.
"""
from __future__ import annotations

import argparse
import errno
import importlib
import os
import socket
import sys
import traceback
from importlib.metadata import PackageNotFoundError, version

from fyrehose.runtime.fatal import exit_on_thread_death

# command -> (module, one-line help)
COMMANDS = {
    "backbone": ("fyrehose.commands.backbone", "run the sequencing backbone"),
    "pub": ("fyrehose.commands.pub", "publish messages (arguments or stdin lines)"),
    "sub": ("fyrehose.commands.sub", "print delivered messages in sequence order"),
    "cache": ("fyrehose.commands.cache", "last value per subject: answer snapshots and initial values"),
    "users": ("fyrehose.commands.users", "the gateways' users file: passwords, tokens, rights (add, remove, list)"),
    "auth": ("fyrehose.commands.auth", "users database for HMAC-authenticated sessions (add, remove, list, bench)"),
    "journal": ("fyrehose.commands.journal", "keep every message on disk, serve FORWARDs, write Parquet"),
    "gateway": ("fyrehose.commands.gateway", "serve Redis, NATS, Marlin or Lumberjack clients from the backbone"),
    "bench": ("fyrehose.commands.bench", "side-by-side throughput and latency: fyrehose, redis-server, nats-server"),
    "loadtest": ("fyrehose.commands.loadtest", "Locust load test over UDP: capacity search, CSV/HTML reports"),
    "pipeline": ("fyrehose.commands.pipeline", "PySpark jobs: journal report, load-test capacity, export"),
    "top": ("fyrehose.commands.top", "the deployment now, from its metrics endpoints: rates, clients, losses, the "
            "pair, lags, gateways"),
    "keepalived": ("fyrehose.commands.keepalived", "print keepalived.conf for one host of a hot standby backbone pair "
                   "and write the scripts it runs"),
}

# Long-running commands: a worker thread that dies ends them (fyrehose.runtime.fatal), never half-alive.
SERVICES = frozenset({"sub", "journal", "cache", "gateway"})

EXIT_USAGE = 2
EXIT_FAILURE = 1
EXIT_INTERNAL = 70  # EX_SOFTWARE: an internal error, not the user's


# OSErrors that describe the machine, its files or its network, never a bug in fyrehose: by class, and by errno
_ENVIRONMENT_OSERRORS = (FileNotFoundError, FileExistsError, PermissionError, IsADirectoryError, NotADirectoryError,
                         ConnectionError, TimeoutError, socket.gaierror, socket.herror)
_ENVIRONMENT_ERRNOS = frozenset({
    errno.EADDRINUSE, errno.EADDRNOTAVAIL, errno.EACCES, errno.EPERM, errno.ENOSPC, errno.EDQUOT, errno.EROFS,
    errno.EIO, errno.ENETDOWN, errno.ENETUNREACH, errno.EHOSTUNREACH, errno.EMFILE, errno.ENFILE, errno.ENOMEM,
    errno.ENAMETOOLONG, errno.ELOOP, errno.ENODEV, errno.ENXIO,
})


def error_line(exc: BaseException) -> str:
    """The error's one line; an exception raised without a message (a bare socket timeout) is named by its type."""
    return str(exc) or f"{type(exc).__name__} (no detail given)"


def _is_user_error(exc: BaseException) -> bool:
    """True when ``exc`` means the user's input or environment is wrong (one line, exit 1), not a bug."""
    from subprocess import TimeoutExpired

    from fyrehose.errors import FyrehoseError
    from fyrehose.protocol.codec import ProtocolError
    from fyrehose.subjects.envelope import EnvelopeError

    if isinstance(exc, (FyrehoseError, argparse.ArgumentError, argparse.ArgumentTypeError, ProtocolError,
                        EnvelopeError, TimeoutExpired)):
        return True
    if isinstance(exc, OSError):
        return isinstance(exc, _ENVIRONMENT_OSERRORS) or exc.errno in _ENVIRONMENT_ERRNOS
    if isinstance(exc, ModuleNotFoundError):  # an optional extra (pyarrow, pyspark, locust, ...) not installed
        return exc.name is not None and exc.name.partition(".")[0] != "fyrehose"
    return False


def _version() -> str:
    try:
        return version("fyrehose")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


class _PrintVersion(argparse.Action):
    """``--version``: the version and which modules run compiled (worked out only when asked: it imports them)."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, **kwargs: object) -> None:
        super().__init__(option_strings, dest, nargs=0, help="print the version and which modules run compiled")

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: object,
                 option_string: str | None = None) -> None:
        from fyrehose.runtime.compiled import describe

        sys.stdout.write(f"fyrehose {_version()}\n{describe()}\n")
        parser.exit()


class OneLineParser(argparse.ArgumentParser):
    """argparse that reports a usage error in one line."""

    def error(self, message: str) -> None:  # type: ignore[override]  # argparse declares error() as returning NoReturn; this one exits too
        sys.stderr.write(f"{self.prog}: error: {message} (see --help)\n")
        sys.exit(EXIT_USAGE)


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="fyrehose", description="fyrehose: a sequenced pub/sub backbone over UDP")
    parser.add_argument("--version", action=_PrintVersion)
    parser.add_argument("--debug", action="store_true",
                        help="print the traceback of any error (also with FYREHOSE_DEBUG=1)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineParser)
    sub.required = True
    for name, (module_name, help_text) in COMMANDS.items():
        command = sub.add_parser(name, help=help_text, description=help_text)
        module = importlib.import_module(module_name)
        module.add_arguments(command)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    args = parser.parse_args(argv)
    module = importlib.import_module(COMMANDS[args.command][0])
    runner = module.run
    if args.command in SERVICES:
        exit_on_thread_death(args.command)
    try:
        return runner(args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    except Exception as exc:
        debug = args.debug or os.environ.get("FYREHOSE_DEBUG", "") not in ("", "0")
        if not _is_user_error(exc):
            traceback.print_exc()
            sys.stderr.write(f"fyrehose {args.command}: internal error: {type(exc).__name__}: {exc} "
                             "(a bug in fyrehose; the traceback is above)\n")
            return EXIT_INTERNAL
        if debug:
            traceback.print_exc()
        sys.stderr.write(f"fyrehose {args.command}: error: {error_line(exc)}\n")
        return EXIT_FAILURE


if __name__ == "__main__":
    sys.exit(main())
