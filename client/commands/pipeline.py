"""``fyrehose pipeline {report,capacity,export,generate}``: the command line of the Spark jobs.

Arguments are checked and inputs looked at before Spark starts (a JVM takes
seconds), so a typo costs nothing.  pyspark is imported inside ``run`` only.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from fyrehose.errors import InputError
from fyrehose.runtime.argtypes import positive_int, whole_seconds

if TYPE_CHECKING:
    from fyrehose.tools.pipeline.timerange import TimeRange  # with pyspark's jobs, imported when one runs

MASTER_HELP = "Spark master URL (default local[*]; under spark-submit, the master given to spark-submit)"


def _conf(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value


def _spark_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--master", metavar="URL", help=MASTER_HELP)
    parser.add_argument("--conf", type=_conf, action="append", default=[], metavar="KEY=VALUE",
                        help="a Spark setting, e.g. --conf spark.driver.memory=4g (repeatable)")


def _time_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--from", dest="start", metavar="T",
                        help="only messages received at or after T (ISO-8601, UTC unless an offset is given, "
                             "or unix seconds)")
    parser.add_argument("--to", dest="end", metavar="T", help="only messages received before T")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    jobs = parser.add_subparsers(dest="job", metavar="JOB", parser_class=type(parser))
    jobs.required = True

    report = jobs.add_parser("report", help="counts, rates, gaps, duplicates and latency of a journal",
                             description="Counts, rates, missing ranges, duplicates and latency of a journal: "
                                         "Parquet tables, summary.json, report.html and PNG charts in --out.")
    report.add_argument("--journal", required=True, type=Path, metavar="DIR", help="the journal directory")
    report.add_argument("--out", required=True, type=Path, metavar="DIR", help="where the report goes")
    _time_options(report)
    report.add_argument("--window", type=whole_seconds, metavar="SECONDS",
                        help="time window for rates (default: a round size giving at most 400 windows)")
    report.add_argument("--top", type=positive_int, default=20, metavar="N", help="top subjects listed (default 20)")
    report.add_argument("--bucket-size", type=positive_int, default=1 << 20, metavar="N",
                        help="sequences per bucket of the gap analysis (default 1048576)")
    _spark_options(report)

    capacity = jobs.add_parser("capacity", help="asked vs delivered rate, loss, latency and CPU of a load test",
                               description="Joins a load test's Locust results, backbone metric samples and "
                                           "(optionally) the journal into tables, charts and capacity.html.")
    capacity.add_argument("--loadtest", required=True, type=Path, metavar="DIR",
                          help="results of fyrehose loadtest --out DIR")
    capacity.add_argument("--journal", type=Path, metavar="DIR", help="a journal that recorded the run")
    capacity.add_argument("--out", required=True, type=Path, metavar="DIR", help="where the report goes")
    _spark_options(capacity)

    export = jobs.add_parser("export", help="messages by subject pattern and time, as Parquet or JSON lines",
                             description="Writes the journal's messages (optionally only a subject pattern and a "
                                         "time range) to OUT/parquet/ or OUT/jsonl/.")
    export.add_argument("--journal", required=True, type=Path, metavar="DIR", help="the journal directory")
    export.add_argument("--out", required=True, type=Path, metavar="DIR", help="where the export goes")
    export.add_argument("--format", required=True, choices=("parquet", "jsonl"))
    export.add_argument("--subject", metavar="PATTERN", help="subject pattern: a.b, a.*, a.> (raw payloads never match)")
    _time_options(export)
    _spark_options(export)

    generate = jobs.add_parser("generate", help="write a synthetic journal with known gaps and duplicates",
                               description="Writes a synthetic journal in the journal's exact format (no Spark).")
    generate.add_argument("--out", required=True, type=Path, metavar="DIR", help="the journal directory to create")
    generate.add_argument("--messages", required=True, type=positive_int, metavar="N", help="distinct sequences held")
    generate.add_argument("--rate", type=float, default=1000.0, metavar="R", help="messages/s of receive time (1000)")
    generate.add_argument("--start", default="2024-05-01T23:30:00Z", metavar="T", help="receive time of the first")
    generate.add_argument("--subjects", type=int, default=16, metavar="K", help="distinct subjects (16)")
    generate.add_argument("--size", type=positive_int, default=100, metavar="BYTES", help="mean payload size (100)")
    generate.add_argument("--gaps", type=int, default=10, metavar="N", help="random missing ranges (10)")
    generate.add_argument("--duplicates", type=int, default=10, metavar="N", help="random sequences held twice (10)")
    generate.add_argument("--seed", type=int, default=0, help="random seed (0)")


def _time_range(args: argparse.Namespace) -> TimeRange:
    from fyrehose.tools.pipeline.timerange import TimeRange, parse_time

    return TimeRange(parse_time(args.start) if args.start else None, parse_time(args.end) if args.end else None)


def run(args: argparse.Namespace) -> int:
    if args.job == "generate":
        return _generate(args)
    from fyrehose.tools.pipeline.spark import spark_session

    if args.job == "report":
        from fyrehose.tools.pipeline.journal import check_journal
        from fyrehose.tools.pipeline.report import ReportOptions, run_report

        report_options = ReportOptions(args.journal, args.out, _time_range(args), args.window, args.top,
                                       args.bucket_size)
        check_journal(args.journal)
        with spark_session(args.master, "fyrehose pipeline report", dict(args.conf)) as spark:
            summary = run_report(spark, report_options)
        print(f"{summary['messages']:,} messages, sequences {summary['first_seq']}..{summary['last_seq']}: "
              f"{summary['missing']:,} missing in {summary['gap_ranges']:,} ranges, {summary['duplicates']:,} duplicates; "
              f"{summary['rows_per_s']:,.0f} rows/s; report: {args.out / 'report.html'}")
        return 0
    if args.job == "capacity":
        from fyrehose.tools.pipeline.capacity import CapacityOptions, run_capacity
        from fyrehose.tools.pipeline.journal import check_journal
        from fyrehose.tools.pipeline.loadtest_inputs import check_loadtest

        check_loadtest(args.loadtest)
        if args.journal is not None:
            check_journal(args.journal)
        with spark_session(args.master, "fyrehose pipeline capacity", dict(args.conf)) as spark:
            result = run_capacity(spark, CapacityOptions(args.loadtest, args.out, args.journal))
        print(f"{len(result['steps'])} load phases, max sustained rate {result['max_sustained_rate']} msgs/s; "
              f"report: {args.out / 'capacity.html'}")
        return 0
    from fyrehose.subjects.patterns import check_pattern
    from fyrehose.tools.pipeline.export import ExportOptions, run_export
    from fyrehose.tools.pipeline.journal import check_journal

    if args.subject is not None:
        check_pattern(args.subject)
    options = ExportOptions(args.journal, args.out, args.format, args.subject, _time_range(args))
    check_journal(args.journal)
    with spark_session(args.master, "fyrehose pipeline export", dict(args.conf)) as spark:
        target = run_export(spark, options)
    print(f"exported to {target}/")
    return 0


def _generate(args: argparse.Namespace) -> int:
    import random
    from dataclasses import replace

    from fyrehose.tools.pipeline.generate import JournalSpec, generate
    from fyrehose.tools.pipeline.timerange import parse_time

    if args.out.exists() and any(args.out.iterdir()):
        raise InputError(f"{args.out} exists and is not empty")
    base = JournalSpec(messages=args.messages, start=parse_time(args.start), rate=args.rate,
                       subjects=args.subjects, raw_share=0.1 if args.subjects else 1.0, size=args.size,
                       seed=args.seed)
    chooser = random.Random(args.seed)
    space = base.messages  # place gaps between existing sequences, then shift each past the gaps before it
    cuts = sorted(chooser.sample(range(2, space), min(max(args.gaps, 0), max(space - 2, 0))))
    missing, shift = [], 0
    for cut in cuts:
        length = chooser.randint(1, 100)
        missing.append((cut + shift, cut + shift + length - 1))
        shift += length
    holder = replace(base, missing=tuple(missing))
    present = [seq for seq in chooser.sample(range(1, holder.last_seq + 1), min(max(args.duplicates, 0) * 2, holder.last_seq))
               if not any(low <= seq <= high for low, high in missing)][:max(args.duplicates, 0)]
    spec = replace(holder, duplicates=tuple(sorted(present)))
    result = generate(spec, args.out)
    json.dump({"rows": result.rows, "files": len(result.files), "first_seq": spec.first_seq, "last_seq": spec.last_seq,
               "missing": [list(gap) for gap in spec.missing], "duplicates": list(spec.duplicates)},
              sys.stdout)
    sys.stdout.write("\n")
    return 0
