"""The one command line, ``fyrehose <command>``.

Each command lives in a module with ``add_arguments(parser)`` and
``run(args) -> int`` (or ``add_NAME_arguments``/``run_NAME`` when one module
serves several); those modules import their heavy dependencies inside ``run``
so that every command starts fast.  Any error ends the process with one line
on stderr and a non-zero exit.
"""
from __future__ import annotations

import argparse
import importlib
import sys

from fyrehose.fatal import exit_on_thread_death

# command -> (module, one-line help)
COMMANDS = {
    "backbone": ("fyrehose.backbone.command", "run the sequencing backbone"),
    "pub": ("fyrehose.pubsub_commands", "publish messages (arguments or stdin lines)"),
    "sub": ("fyrehose.pubsub_commands", "print delivered messages in sequence order"),
    "cache": ("fyrehose.cache.command", "last value per subject: answer snapshots and initial values"),
    "auth": ("fyrehose.auth_command", "users database for HMAC-authenticated sessions (add, remove, list, bench)"),
    "journal": ("fyrehose.journal.command", "keep every message on disk, serve FORWARDs, write Parquet"),
    "gateway": ("fyrehose.gateways.command", "serve Redis, NATS, Marlin or Lumberjack clients from the backbone"),
    "bench": ("fyrehose.tools.bench.command", "side-by-side throughput and latency: fyrehose, redis-server, nats-server"),
    "loadtest": ("fyrehose.loadtest.command", "Locust load test over UDP: capacity search, CSV/HTML reports"),
    "pipeline": ("fyrehose.tools.pipeline.command", "PySpark jobs: journal report, load-test capacity, export"),
}

# Long-running commands: a worker thread that dies ends them (fyrehose.fatal), never half-alive.
SERVICES = frozenset({"sub", "journal", "cache", "gateway"})

EXIT_USAGE = 2
EXIT_FAILURE = 1


class OneLineParser(argparse.ArgumentParser):
    """argparse that reports a usage error in one line."""

    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"{self.prog}: error: {message} (see --help)\n")
        sys.exit(EXIT_USAGE)


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="fyrehose", description="fyrehose: a sequenced pub/sub backbone over UDP")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineParser)
    sub.required = True
    for name, (module_name, help_text) in COMMANDS.items():
        command = sub.add_parser(name, help=help_text, description=help_text)
        module = importlib.import_module(module_name)
        adder = getattr(module, f"add_{name}_arguments", None) or module.add_arguments
        adder(command)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    args = parser.parse_args(argv)
    module = importlib.import_module(COMMANDS[args.command][0])
    runner = getattr(module, f"run_{args.command}", None) or module.run
    if args.command in SERVICES:
        exit_on_thread_death(args.command)
    try:
        return runner(args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    except Exception as exc:  # one line, never a traceback, for any failure
        sys.stderr.write(f"fyrehose {args.command}: error: {exc}\n")
        return EXIT_FAILURE


if __name__ == "__main__":
    sys.exit(main())
