"""``fyrehose journal``: run the journal (the bare form), or ``verify``, ``inspect``, ``export``, ``bench`` a directory.

``fyrehose journal --backbone HOST:PORT --dir DIR`` is the form other tools
depend on (design brief §5); the subcommands sit beside it.  Heavy imports
(the client, pyarrow) happen inside the runners so that ``--help`` is quick.
"""
from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

from fyrehose.errors import CommandFailed, InputError
from fyrehose.journal.retention import parse_duration, parse_quantity, parse_size
from fyrehose.journal.store import FSYNC_MODES
from fyrehose.net.addresses import add_backbone_arguments, add_multicast_argument, parse_hostport
from fyrehose.runtime.argtypes import positive_duration, positive_float, positive_int

PYARROW_MISSING = "Parquet output needs pyarrow: pip install 'fyrehose[journal]'"


def _argument(parse):
    """An argparse type from a parser that raises ValueError, so bad values are one-line usage errors."""
    def convert(text: str):
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    convert.__name__ = parse.__name__
    return convert


def _retain(text: str) -> str:
    parse_quantity(text)
    return text


def _range(text: str) -> tuple[int, int]:
    low, sep, high = text.partition("..")
    try:
        first, last = int(low), int(high if sep else low)
    except ValueError:
        raise ValueError(f"{text!r} is not a sequence range like 100..200") from None
    if not 1 <= first <= last:
        raise ValueError(f"{text!r}: want 1 <= FROM <= TO")
    return first, last


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_backbone_arguments(parser)
    add_multicast_argument(parser)
    parser.add_argument("--dir", type=Path, metavar="DIR", help="the journal directory (created if missing)")
    parser.add_argument("--fsync", choices=FSYNC_MODES, default="interval",
                        help="always: every written batch is fsynced before the next; interval: every "
                             "--fsync-interval seconds; never: the OS decides (default interval)")
    parser.add_argument("--fsync-interval", type=positive_duration, default=1.0, metavar="S",
                        help="seconds between fsyncs with --fsync interval (default 1)")
    parser.add_argument("--retain", action="append", type=_argument(_retain), default=[], metavar="AGE|SIZE",
                        help="delete the oldest segments once older than AGE (a duration like every other: seconds, "
                             "or 90s, 1m30s, 12h, 7d; also 90min, 2w) or while all segments exceed SIZE (e.g. 50GB, "
                             "512MiB); repeat to give both (default: keep all)")
    parser.add_argument("--segment-size", type=_argument(parse_size), default=64 << 20, metavar="SIZE",
                        help="seal a segment at this size (default 64MiB)")
    parser.add_argument("--segment-age", type=_argument(parse_duration), default=600.0, metavar="AGE",
                        help="seal a segment once its oldest record is this old (default 10min)")
    parser.add_argument("--give-up", type=positive_duration, default=15.0, metavar="S",
                        help="record a gap as lost after S seconds of REQUESTs to other clients (default 15)")
    parser.add_argument("--forward-rate", type=positive_float, default=1_000_000, metavar="N",
                        help="re-DELIVER at most N messages/s to each requester when answering FORWARDs "
                             "(default 200000)")
    parser.add_argument("--metrics", type=_argument(parse_hostport), metavar="HOST:PORT",
                        help="serve Prometheus metrics (lag, write rate, fsync latency, losses) over HTTP here")
    parser.add_argument("--lag-warning", type=positive_duration, default=1.0, metavar="S",
                        help="say on stderr once when the journal falls more than S seconds behind the backbone, "
                             "and again when it has caught up (default 1)")
    parser.add_argument("--from", dest="from_seq", type=positive_int, metavar="SEQ",
                        help="an empty journal starts at SEQ, backfilling from other clients "
                             "(default: with the live stream); a journal with data resumes where it ended")
    parser.add_argument("--no-parquet", action="store_true",
                        help="do not write Parquet files for sealed segments")
    actions = parser.add_subparsers(dest="action", metavar="ACTION",
                                    description="instead of running the journal, work on a journal directory:")
    verify = actions.add_parser("verify", help="check checksums, order, the gap index and the Parquet files",
                                description="check checksums, order, the gap index and the Parquet files; "
                                            "exit 1 when a problem is found")
    verify.add_argument("directory", type=Path, metavar="DIR")
    inspect = actions.add_parser("inspect", help="list segments, gaps and where the journal resumes",
                                 description="list segments, gaps and where the journal resumes")
    inspect.add_argument("directory", type=Path, metavar="DIR")
    inspect.add_argument("--records", type=_argument(_range), metavar="FROM..TO",
                         help="print these messages (SEQ, receive time, subject, data; tab-separated)")
    export = actions.add_parser("export", help="write Parquet for sealed segments not exported yet",
                                description="write Parquet for sealed segments not exported yet "
                                            "(the journal must not be running on DIR)")
    export.add_argument("directory", type=Path, metavar="DIR")
    export.add_argument("--force", action="store_true", help="rewrite the Parquet files of every sealed segment")
    export.add_argument("--seal", action="store_true", help="seal the last segment first, so it is exported too")
    bench = actions.add_parser("bench", help="measure journaled msgs/s and the FORWARD rate from disk",
                               description="measure journaled msgs/s per fsync mode and the FORWARD service "
                                           "rate from disk, against a backbone and journals it starts itself")
    from fyrehose.tools.bench.journal import add_bench_arguments

    add_bench_arguments(bench)


def run(args: argparse.Namespace) -> int:
    if args.action is None:
        return _run_journal(args)
    if args.action == "verify":
        return _verify(args)
    if args.action == "inspect":
        return _inspect(args)
    if args.action == "export":
        return _export(args)
    from fyrehose.tools.bench.journal import run_bench

    return run_bench(args)


def _run_journal(args: argparse.Namespace) -> int:
    import signal
    import threading

    from fyrehose.journal.retention import parse_retention
    from fyrehose.journal.service import JournalService
    from fyrehose.journal.store import JournalStore

    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):  # first: a stop request during start-up is a clean stop too
        signal.signal(signum, lambda *_: stop.set())
    if args.dir is None:
        raise InputError("--dir is required to run the journal (or give an action: verify, inspect, export, bench)")
    backbone = parse_hostport(args.backbone, 2323)
    if not args.no_parquet and importlib.util.find_spec("pyarrow") is None:
        raise CommandFailed(f"{PYARROW_MISSING}, or run with --no-parquet")
    store = JournalStore(args.dir, fsync=args.fsync, fsync_interval=args.fsync_interval,
                         segment_bytes=args.segment_size, segment_age=args.segment_age)
    resume = store.open()
    if resume is not None:
        ignored = " (--from ignored)" if args.from_seq and args.from_seq != resume else ""
        announcement = f"{args.dir}: resuming at sequence {resume}{ignored}"
    else:
        announcement = f"{args.dir}: starting at " + (f"sequence {args.from_seq}" if args.from_seq else "the live stream")
    if store.stats["truncated bytes"]:
        announcement += f" (cut off a torn tail of {store.stats['truncated bytes']} bytes)"
    service = JournalService(store, backbone, start_seq=resume or args.from_seq, give_up_after=args.give_up,
                             forward_rate=args.forward_rate, retention=parse_retention(args.retain),
                             parquet=not args.no_parquet, bind=args.bind, lag_warning=args.lag_warning,
                             metrics=args.metrics, multicast=args.multicast)
    try:
        service.run(stop, announcement)
        service.seal_and_export()
    finally:
        store.close()
    for signum in (signal.SIGTERM, signal.SIGINT):
        # Everything is on disk: a repeated stop request must not turn this clean exit into a death by signal
        # (interpreter shutdown restores the default handlers, which would terminate the process).
        signal.signal(signum, signal.SIG_IGN)
    service.say(f"stopped: wrote {store.stats['written']} messages, recorded {store.stats['lost']} lost, "
                f"forwarded {service.forwarded}")
    return 0


def _verify(args: argparse.Namespace) -> int:
    from fyrehose.journal.progress import Progress
    from fyrehose.journal.verify import total_bytes, verify_directory

    with Progress(total_bytes(args.directory) if args.directory.is_dir() else 0, "verify") as bar:
        report = verify_directory(args.directory, bar.advance)
    sys.stdout.write("\n".join(report.lines()) + "\n")
    sys.stdout.flush()
    if not report.ok:
        raise CommandFailed(f"{args.directory}: {len(report.problems)} problem(s), listed above")
    return 0


def _inspect(args: argparse.Namespace) -> int:
    from fyrehose.journal.progress import Progress
    from fyrehose.journal.report import describe_directory, print_records, unsealed_bytes

    if args.records:
        if not args.directory.is_dir():
            raise FileNotFoundError(f"{args.directory} is not a directory")
        from_seq, to_seq = args.records  # FROM..TO
        print_records(args.directory, from_seq, to_seq, sys.stdout)
        return 0
    with Progress(unsealed_bytes(args.directory) if args.directory.is_dir() else 0, "inspect") as bar:
        describe_directory(args.directory, sys.stdout, bar.advance)
    return 0


def _export(args: argparse.Namespace) -> int:
    if importlib.util.find_spec("pyarrow") is None:
        raise CommandFailed(PYARROW_MISSING)
    from fyrehose.journal.parquet import export_records
    from fyrehose.journal.progress import Progress
    from fyrehose.journal.store import JournalStore

    if not args.directory.is_dir():
        raise FileNotFoundError(f"{args.directory} is not a directory")
    store = JournalStore(args.directory)
    store.open()
    try:
        if args.seal:
            store.seal_active()
        todo = [s for s in store.sealed_segments() if args.force or not s.summary.exported]
        files = 0
        with Progress(sum(s.summary.size for s in todo), "export") as bar:
            for segment in todo:
                files += len(export_records(store.records_of(segment, bar.advance), store.parquet_dir))
                store.mark_exported(segment)
    finally:
        store.close()
    print(f"exported {len(todo)} segment(s), {sum(s.summary.records for s in todo)} records, "
          f"into {files} Parquet file(s) under {store.parquet_dir}")
    return 0
