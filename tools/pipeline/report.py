"""``pipeline report``: what went through the backbone, what was lost, and how fast, from the journal.

Everything is computed by Spark and written by Spark as Parquet tables under
OUT; only aggregates a few hundred rows long (one row per time window, the
top subjects, size classes, the first gaps) come to the driver, for
``summary.json``, the PNG charts and ``report.html``.  Fixed names other
tools read: ``gaps.parquet`` (``from_seq``, ``to_seq``: inclusive missing
ranges), ``summary.json`` and ``report.html``.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from fyrehose.tools.pipeline import charts
from fyrehose.tools.pipeline.completeness import (
    DEFAULT_BUCKET_SIZE,
    duplicates,
    missing_ranges,
    recorded_coverage,
    sequence_copies,
)
from fyrehose.tools.pipeline.html_page import HtmlPage
from fyrehose.tools.pipeline.journal import read_journal, read_recorded_gaps
from fyrehose.tools.pipeline.publish_time import with_published_us
from fyrehose.tools.pipeline.spark import PipelineError, aggregate_row, readable_errors
from fyrehose.tools.pipeline.tables import write_table
from fyrehose.tools.pipeline.timerange import TimeRange, as_utc, choose_window

LATENCY_QUANTILES = (0.5, 0.9, 0.99, 0.999)
LISTED_GAPS = 50  # gap ranges shown in report.html (all of them are in gaps.parquet)
RAW = "(raw)"  # how report.html names payloads without a subject
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class ReportOptions:
    journal: Path
    out: Path
    time_range: TimeRange = TimeRange()
    window_seconds: int | None = None  # None: chosen from the time span
    top: int = 20
    bucket_size: int = DEFAULT_BUCKET_SIZE


def _window_start(seconds: int) -> F.Column:
    step = seconds * 1_000_000
    return F.expr(f"timestamp_micros((unix_micros(received_at) div {step}) * {step})")


def _micros(moment: datetime) -> int:
    return (moment - _EPOCH) // timedelta(microseconds=1)


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.astimezone(UTC).isoformat()


def _overview(rows: DataFrame) -> dict:
    result = aggregate_row(rows.agg(
        F.count(F.lit(1)).alias("messages"),
        F.min("seq").alias("first_seq"), F.max("seq").alias("last_seq"),
        F.min("received_at").alias("first"), F.max("received_at").alias("last"),
        F.sum("size").alias("bytes"),
        F.min("size").alias("size_min"), F.max("size").alias("size_max"), F.avg("size").alias("size_mean"),
        F.percentile_approx("size", [0.5, 0.99]).alias("size_quantiles"),
        F.count_if(F.col("subject").isNull()).alias("raw_messages"),
    ))
    return result.asDict()


def _size_classes(rows: DataFrame) -> list[tuple[str, int]]:
    """Messages per power-of-two size class (``[2^k, 2^(k+1))``), collected: at most 17 rows."""
    classes = (rows.select(F.when(F.col("size") <= 0, F.lit(-1))
                           .otherwise(F.floor(F.log2(F.col("size")))).alias("k"))
               .groupBy("k").count().orderBy("k").collect())
    labels = []
    for row in classes:
        labels.append(("0" if row.k < 0 else f"{1 << row.k}–{(1 << (row.k + 1)) - 1}", row["count"]))
    return labels


def run_report(spark: SparkSession, options: ReportOptions) -> dict:
    """Run the report job; returns the summary it also writes to ``OUT/summary.json``."""
    started = time.perf_counter()
    out = options.out
    out.mkdir(parents=True, exist_ok=True)
    rows = read_journal(spark, options.journal, options.time_range).select(
        "seq", "received_at", "subject", "size", "payload")
    with readable_errors(f"reading journal {options.journal}"):
        overview = _overview(rows)
    if not overview["messages"]:
        raise PipelineError(f"journal {options.journal}: no messages in the selected time range")
    first, last = as_utc(overview["first"]), as_utc(overview["last"])
    span = max((last - first).total_seconds(), 1e-6)
    window = options.window_seconds or choose_window(span)

    with readable_errors("computing counts and rates"):
        per_subject_window = (rows.groupBy(_window_start(window).alias("window_start"), "subject")
                              .agg(F.count(F.lit(1)).alias("messages"), F.sum("size").alias("bytes"),
                                   F.min("received_at").alias("first_received_at"),
                                   F.max("received_at").alias("last_received_at"))
                              .persist(StorageLevel.MEMORY_AND_DISK))
        write_table(per_subject_window, out / "subject_windows.parquet", "window_start", "subject")
        step_us = window * 1_000_000
        every_window = spark.range(_micros(first) // step_us, _micros(last) // step_us + 1).select(
            F.timestamp_micros(F.col("id") * step_us).alias("window_start"))  # windows without messages count too
        windows = (every_window.join(per_subject_window.groupBy("window_start")
                                     .agg(F.sum("messages").alias("messages"), F.sum("bytes").alias("bytes")),
                                     "window_start", "left")
                   .na.fill(0, ["messages", "bytes"])
                   .withColumn("messages_per_s", F.col("messages") / window)
                   .withColumn("bytes_per_s", F.col("bytes") / window))
        window_rows = write_table(windows, out / "windows.parquet", "window_start").orderBy("window_start").collect()
        subjects = (per_subject_window.groupBy("subject")
                    .agg(F.sum("messages").alias("messages"), F.sum("bytes").alias("bytes"),
                         F.min("first_received_at").alias("first_received_at"),
                         F.max("last_received_at").alias("last_received_at"))
                    .withColumn("share", F.col("messages") / overview["messages"])
                    .withColumn("messages_per_s", F.col("messages") / span))
        subjects = write_table(subjects, out / "subjects.parquet", "subject")
        subject_count = subjects.count()
        top_subjects = subjects.orderBy(F.desc("messages"), "subject").limit(options.top).collect()
        per_subject_window.unpersist()
        sizes = _size_classes(rows)

    with readable_errors("computing sequence completeness"):
        copies = sequence_copies(rows).persist(StorageLevel.MEMORY_AND_DISK)
        dup = aggregate_row(write_table(duplicates(copies), out / "duplicates.parquet", "seq").agg(
            F.count(F.lit(1)).alias("seqs"), F.coalesce(F.sum(F.col("copies") - 1), F.lit(0)).alias("extra")))
        gaps = write_table(missing_ranges(copies, options.bucket_size), out / "gaps.parquet", "from_seq")
        copies.unpersist()
        gap_totals = aggregate_row(gaps.agg(F.count(F.lit(1)).alias("ranges"),
                                            F.coalesce(F.sum("missing"), F.lit(0)).alias("missing")))
        listed_gaps = gaps.orderBy("from_seq").limit(LISTED_GAPS).collect()
        gap_windows = (gaps.withColumnRenamed("seen_before", "received_at")
                       .groupBy(_window_start(window).alias("window_start"))
                       .agg(F.sum("missing").alias("missing"), F.count(F.lit(1)).alias("ranges"))
                       .orderBy("window_start").collect())
        recorded = read_recorded_gaps(spark, options.journal)
        recorded_summary = None
        if recorded is not None:
            coverage = write_table(recorded_coverage(gaps, recorded), out / "journal_gaps.parquet", "from_seq")
            totals = aggregate_row(coverage.agg(
                F.count(F.lit(1)).alias("ranges"),
                F.coalesce(F.sum("recorded_missing"), F.lit(0)).alias("missing"),
                F.coalesce(F.sum("confirmed_missing"), F.lit(0)).alias("confirmed")))
            recorded_summary = {
                "ranges": totals.ranges, "missing": totals.missing, "confirmed_missing": totals.confirmed,
                "missing_not_recorded": gap_totals.missing - totals.confirmed,
            }

    with readable_errors("computing publish-to-journal latency"):
        timed = (with_published_us(rows).where(F.col("published_us").isNotNull())
                 .withColumn("latency_ms", (F.expr("unix_micros(received_at)") - F.col("published_us")) / 1000.0))
        quantiles = F.percentile_approx("latency_ms", list(LATENCY_QUANTILES))
        by_window = (timed.rollup(_window_start(window).alias("window_start"))  # null window_start: all of them
                     .agg(F.count(F.lit(1)).alias("messages"), quantiles.alias("quantiles"),
                          F.min("latency_ms").alias("min_ms"), F.max("latency_ms").alias("max_ms"))
                     .select("window_start", "messages", "min_ms",
                             *(F.col("quantiles")[i].alias(_quantile_name(q)) for i, q in enumerate(LATENCY_QUANTILES)),
                             "max_ms")
                     .persist(StorageLevel.MEMORY_AND_DISK))  # small: one row per window, computed once
        latency_rows = write_table(by_window.where(F.col("window_start").isNotNull()), out / "latency.parquet",
                                   "window_start").orderBy("window_start").collect()
        overall = by_window.where(F.col("window_start").isNull()).first()
        by_window.unpersist()
        latency = None
        if overall is not None and overall.messages:
            latency = {key: overall[key] for key in ("messages", "min_ms", *map(_quantile_name, LATENCY_QUANTILES),
                                                     "max_ms")}

    distinct = overview["messages"] - dup.extra
    expected = overview["last_seq"] - overview["first_seq"] + 1
    summary = {
        "journal": str(options.journal),
        "from": _iso(options.time_range.start), "to": _iso(options.time_range.end),
        "messages": overview["messages"],
        "distinct_seqs": distinct,
        "first_seq": overview["first_seq"], "last_seq": overview["last_seq"],
        "expected": expected,
        "missing": gap_totals.missing,
        "gap_ranges": gap_totals.ranges,
        "duplicates": dup.extra,
        "duplicate_seqs": dup.seqs,
        "completeness": distinct / expected,
        "first_received_at": _iso(first), "last_received_at": _iso(last),
        "duration_s": span,
        "messages_per_s": overview["messages"] / span,
        "bytes": overview["bytes"],
        "bytes_per_s": overview["bytes"] / span,
        "subjects": subject_count,
        "raw_messages": overview["raw_messages"],
        "size": {"min": overview["size_min"], "p50": overview["size_quantiles"][0],
                 "p99": overview["size_quantiles"][1], "max": overview["size_max"], "mean": overview["size_mean"]},
        "top_subjects": [{"subject": row.subject, "messages": row.messages, "bytes": row.bytes, "share": row.share}
                         for row in top_subjects],
        "latency": latency,
        "journal_recorded_gaps": recorded_summary,
        "window_s": window,
    }
    chart_paths = _charts(out, window_rows, gap_windows, sizes, latency_rows, (first, last), window)
    _html(out, summary, listed_gaps, chart_paths)
    elapsed = time.perf_counter() - started
    summary["elapsed_s"] = elapsed
    summary["rows_per_s"] = overview["messages"] / elapsed
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def _quantile_name(quantile: float) -> str:
    return "p" + f"{quantile * 100:g}".replace(".", "") + "_ms"


def _charts(out: Path, window_rows, gap_windows, sizes, latency_rows, span: tuple[datetime, datetime],
            window: int) -> dict[str, Path]:
    padded = (span[0] - timedelta(seconds=window / 2), span[1] + timedelta(seconds=window / 2))
    starts = [as_utc(row.window_start) for row in window_rows]
    paths = {
        "rate": charts.time_series(
            out / "rate.png", f"messages per second ({window} s windows)", "messages/s",
            {"received by the journal": (starts, [row.messages_per_s for row in window_rows])}, stepped=True),
        "gaps": charts.timeline_bars(
            out / "gaps.png", "missing messages (permanent losses), placed where each gap began", "missing messages",
            [as_utc(row.window_start) for row in gap_windows], [row.missing for row in gap_windows], window,
            span=padded, empty_text="no gaps: every sequence from first to last is present"),
        "sizes": charts.category_bars(
            out / "sizes.png", "payload size distribution", "messages",
            [f"{label} B" for label, _ in sizes], {"messages": [count for _, count in sizes]}),
    }
    if latency_rows:
        latency_starts = [as_utc(row.window_start) for row in latency_rows]
        paths["latency"] = charts.time_series(
            out / "latency.png", "publish-to-journal latency", "ms",
            {"p50": (latency_starts, [row.p50_ms for row in latency_rows]),
             "p99": (latency_starts, [row.p99_ms for row in latency_rows])})
    return paths


def _html(out: Path, summary: dict, listed_gaps, chart_paths: dict[str, Path]) -> Path:
    page = HtmlPage(f"fyrehose journal report: {summary['journal']}")
    page.facts({
        "messages (rows)": summary["messages"],
        "sequences": f"{summary['first_seq']:,} – {summary['last_seq']:,}",
        "received": f"{summary['first_received_at']} – {summary['last_received_at']}",
        "time range asked": f"{summary['from'] or 'start'} – {summary['to'] or 'end'}",
        "messages/s (average)": summary["messages_per_s"],
        "bytes": summary["bytes"],
        "subjects": summary["subjects"],
        "messages without a subject": summary["raw_messages"],
    })
    page.heading("Rates")
    page.image(chart_paths["rate"], "messages per second over time")
    page.heading("Completeness")
    recorded = summary["journal_recorded_gaps"]
    page.facts({
        "expected sequences (first to last)": summary["expected"],
        "missing (permanent losses)": summary["missing"],
        "gap ranges": summary["gap_ranges"],
        "duplicate rows": summary["duplicates"],
        "sequences held more than once": summary["duplicate_seqs"],
        "completeness": f"{summary['completeness']:.6%}",
        "missing and recorded in the journal's gaps.jsonl": None if recorded is None else recorded["confirmed_missing"],
        "missing but not recorded in gaps.jsonl": None if recorded is None else recorded["missing_not_recorded"],
    })
    page.image(chart_paths["gaps"], "missing messages on a timeline")
    if listed_gaps:
        more = summary["gap_ranges"] - len(listed_gaps)
        page.note(f"The first {len(listed_gaps)} gap ranges" + (f" ({more:,} more in gaps.parquet)" if more > 0 else "")
                  + ": inclusive, with the receive times of the messages around them.")
        page.table(["from_seq", "to_seq", "missing", "last seen before", "first seen after"],
                   [(g.from_seq, g.to_seq, g.missing, _iso(g.seen_before), _iso(g.seen_after)) for g in listed_gaps],
                   text_columns=(3, 4))
    page.heading("Top subjects")
    page.table(["subject", "messages", "share", "bytes"],
               [(s["subject"] or RAW, s["messages"], f"{s['share']:.2%}", s["bytes"]) for s in summary["top_subjects"]])
    page.heading("Payload sizes")
    size = summary["size"]
    page.facts({"min": size["min"], "p50": size["p50"], "p99": size["p99"], "max": size["max"], "mean": size["mean"]})
    page.image(chart_paths["sizes"], "payload size distribution")
    page.heading("Publish-to-journal latency")
    latency = summary["latency"]
    if latency is None:
        page.note("No message carried a publish time (see docs/pipeline.md, \"Publish time\").")
    else:
        page.facts({"messages with a publish time": latency["messages"],
                    **{key: latency[key] for key in ("min_ms", "p50_ms", "p90_ms", "p99_ms", "p999_ms", "max_ms")}})
        page.image(chart_paths["latency"], "publish-to-journal latency over time")
    page.note("Tables (Parquet, written by Spark): windows.parquet, subjects.parquet, subject_windows.parquet, "
              "gaps.parquet, duplicates.parquet, latency.parquet" + (", journal_gaps.parquet" if recorded else "")
              + "; summary.json.")
    return page.write(out / "report.html")
