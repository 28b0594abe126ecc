"""``pipeline capacity``: one load test's asked, sent and delivered rate, loss, latency and CPU, joined up.

Three sources describe the same run from different sides: Locust (what the
publishers and subscribers saw, per second), the backbone's metric samples
(what it sequenced, delivered and dropped, and the CPU each of its processes
used) and, optionally, the journal (what actually reached it, and with which
publish-to-journal latency, from the load tester's ``FHLT`` stamps).  Spark
joins them on the second and on each load phase's time span; the tables go
to OUT as Parquet, the small per-phase results into ``capacity.json``, four
PNG charts and ``capacity.html``.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from fyrehose.loadtest.results import describe_shortfall
from fyrehose.tools.pipeline import charts
from fyrehose.tools.pipeline.html_page import HtmlPage
from fyrehose.tools.pipeline.journal import read_journal
from fyrehose.tools.pipeline.loadtest_inputs import (
    check_loadtest,
    counter_rates,
    read_history,
    read_metric_samples,
    read_stats,
    read_steps,
    read_summary,
)
from fyrehose.tools.pipeline.publish_time import with_published_us
from fyrehose.tools.pipeline.spark import PipelineError, aggregate_row, readable_errors
from fyrehose.tools.pipeline.tables import write_table
from fyrehose.tools.pipeline.timerange import TimeRange, as_utc

PUSH, DELIVER = "PUSH", "DELIVER"
PUSHES, DELIVERED, DROPPED, CPU = ("fyrehose_pushes_total", "fyrehose_delivered_total", "fyrehose_dropped_total",
                                   "fyrehose_process_cpu_seconds_total")
JOURNAL_MARGIN_S = 30  # journal rows this long after the last phase still belong to the run (recovery, drain)


@dataclass(frozen=True)
class CapacityOptions:
    loadtest: Path
    out: Path
    journal: Path | None = None


def _utc(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


def _per_step_metrics(steps: DataFrame, samples: DataFrame) -> DataFrame:
    """For each phase and counter: the counter's increase over the samples inside the phase, per second."""
    inside = steps.select("step", "t_start", "t_end").join(
        samples.where(F.col("name").endswith("_total")),
        (F.col("t") >= F.col("t_start")) & (F.col("t") <= F.col("t_end")))
    return (inside.groupBy("step", "key", "name", "process")
            .agg(F.max("value").alias("high"), F.min("value").alias("low"), F.max("t").alias("t1"), F.min("t").alias("t0"))
            .where(F.col("t1") > F.col("t0"))
            .select("step", "key", "name", "process",
                    ((F.col("high") - F.col("low")) / (F.col("t1") - F.col("t0"))).alias("rate")))


def run_capacity(spark: SparkSession, options: CapacityOptions) -> dict:
    """Run the capacity job; returns what it also writes to ``OUT/capacity.json``."""
    check_loadtest(options.loadtest)
    out = options.out
    out.mkdir(parents=True, exist_ok=True)
    with readable_errors(f"reading load test results {options.loadtest}"):
        summary = read_summary(spark, options.loadtest).asDict(recursive=True)
        steps = read_steps(spark, options.loadtest).cache()
        bounds = aggregate_row(steps.agg(F.min("t_start").alias("t0"), F.max("t_end").alias("t1")))
    if bounds.t0 is None:
        raise PipelineError(f"{options.loadtest / 'steps.jsonl'}: no load phase with t_start and t_end")
    subscribers = max(int(summary.get("subscribers") or 1), 1)

    with readable_errors("joining Locust's history, the backbone metrics and the journal"):
        history = read_history(spark, options.loadtest)
        samples = read_metric_samples(spark, options.loadtest).cache()
        rates = counter_rates(samples)
        first_second = math.floor(bounds.t0) - 1
        last_second = math.ceil(bounds.t1) + 1
        seconds = spark.range(first_second, last_second + 1).select(F.col("id").alias("second"))
        locust = history.where(F.col("type").isin(PUSH, DELIVER)).groupBy("second").pivot("type", [PUSH, DELIVER]).agg(
            F.sum("requests_s").alias("per_s"), F.max("p50").alias("p50_ms"), F.max("p99").alias("p99_ms"))
        backbone = rates.groupBy("second").agg(
            F.sum(F.when(F.col("name") == PUSHES, F.col("rate"))).alias("backbone_pushes_per_s"),
            F.sum(F.when(F.col("name") == DELIVERED, F.col("rate"))).alias("backbone_delivered_per_s"),
            F.coalesce(F.sum(F.when(F.col("name") == DROPPED, F.col("rate"))), F.lit(0.0)).alias("backbone_dropped_per_s"))
        offered = seconds.join(steps, (F.col("second") >= F.floor("t_start")) & (F.col("second") < F.col("t_end"))) \
            .groupBy("second").agg(F.max("offered_rate").alias("offered_per_s"), F.max("step").alias("step"))
        timeline = (seconds.join(offered, "second", "left").join(locust, "second", "left")
                    .join(backbone, "second", "left")
                    .select(F.timestamp_seconds("second").alias("time"), "step", "offered_per_s",
                            F.col(f"{PUSH}_per_s").alias("confirmed_per_s"),
                            (F.col(f"{DELIVER}_per_s") / subscribers).alias("delivered_per_subscriber_per_s"),
                            "backbone_pushes_per_s", "backbone_delivered_per_s", "backbone_dropped_per_s",
                            F.col(f"{PUSH}_p50_ms").alias("push_p50_ms"), F.col(f"{PUSH}_p99_ms").alias("push_p99_ms"),
                            F.col(f"{DELIVER}_p50_ms").alias("deliver_p50_ms"),
                            F.col(f"{DELIVER}_p99_ms").alias("deliver_p99_ms")))
        cpu = (rates.where(F.col("name") == CPU)
               .select(F.timestamp_seconds("second").alias("time"), "process", F.col("rate").alias("cpu_cores")))
        step_metrics = _per_step_metrics(steps, samples).cache()
        step_cpu = (step_metrics.where(F.col("name") == CPU)
                    .select("step", "process", F.col("rate").alias("cpu_cores")))
        step_backbone = step_metrics.groupBy("step").agg(
            F.sum(F.when(F.col("name") == PUSHES, F.col("rate"))).alias("backbone_pushes_per_s"),
            F.coalesce(F.sum(F.when(F.col("name") == DROPPED, F.col("rate"))), F.lit(0.0)).alias("backbone_dropped_per_s"))
        step_table = steps.join(step_backbone, "step", "left")
        if options.journal is not None:
            journal_seconds, journal_steps = _journal(spark, options.journal, steps, bounds.t0, bounds.t1)
            timeline = timeline.join(journal_seconds, "time", "left")
            step_table = step_table.join(journal_steps, "step", "left")
        timeline_rows = write_table(timeline, out / "capacity_timeline.parquet", "time").orderBy("time").collect()
        cpu_rows = write_table(cpu, out / "capacity_cpu.parquet", "time", "process").orderBy("time").collect()
        step_cpu_rows = write_table(step_cpu, out / "capacity_step_cpu.parquet", "step", "process").collect()
        step_rows = [row.asDict() for row in
                     write_table(step_table, out / "capacity_steps.parquet", "step").orderBy("step").collect()]
        latency_rows = [row.asDict() for row in
                        write_table(read_stats(spark, options.loadtest), out / "capacity_latency.parquet",
                                    "type", "name").collect()]
        samples.unpersist()
        steps.unpersist()
        step_metrics.unpersist()

    for row in step_rows:
        row["cpu_cores"] = {cpu_row.process: cpu_row.cpu_cores for cpu_row in step_cpu_rows
                            if cpu_row.step == row["step"] and cpu_row.process is not None}
    result = {
        "loadtest": str(options.loadtest),
        "journal": None if options.journal is None else str(options.journal),
        "shape": summary.get("shape"),
        "subscribers": subscribers,
        "max_sustained_rate": summary.get("max_sustained_rate"),
        "max_sent_rate": summary.get("max_sent_rate"),  # null in results from before it was written
        "generator_shortfall": summary.get("generator_shortfall"),
        "loss_before_recovery": summary.get("loss_before_recovery"),
        "loss_after_recovery": summary.get("loss_after_recovery"),
        "steps": step_rows,
        "latency": latency_rows,
        "cpu_peak_cores": _peaks(cpu_rows),
    }
    paths = _charts(out, timeline_rows, cpu_rows, step_rows, options.journal is not None)
    _html(out, result, paths)
    (out / "capacity.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    return result


def _journal(spark: SparkSession, journal: Path, steps: DataFrame, t0: float, t1: float) -> tuple[DataFrame, DataFrame]:
    """Journal rows received during the run: per second, and per phase with publish-to-journal latency."""
    window = TimeRange(_utc(math.floor(t0)), _utc(math.ceil(t1) + JOURNAL_MARGIN_S))
    rows = with_published_us(read_journal(spark, journal, window).select("seq", "received_at", "payload"))
    per_second = (rows.groupBy(F.date_trunc("second", "received_at").alias("time"))
                  .agg(F.count(F.lit(1)).alias("journal_per_s")))
    received = F.expr("unix_micros(received_at)") / 1e6
    timed = rows.withColumn("at", F.coalesce(F.col("published_us") / 1e6, received))
    per_step = (steps.select("step", "t_start", "t_end")
                .join(timed, (F.col("at") >= F.col("t_start")) & (F.col("at") < F.col("t_end")))
                .groupBy("step", "t_start", "t_end")
                .agg(F.count(F.lit(1)).alias("journal_messages"),
                     F.percentile_approx(F.when(F.col("published_us").isNotNull(),
                                                (F.expr("unix_micros(received_at)") - F.col("published_us")) / 1000.0),
                                         [0.5, 0.99]).alias("q"))
                .select("step", "journal_messages",
                        (F.col("journal_messages") / (F.col("t_end") - F.col("t_start"))).alias("journal_per_s"),
                        F.col("q")[0].alias("journal_p50_ms"), F.col("q")[1].alias("journal_p99_ms")))
    return per_second, per_step


def _peaks(cpu_rows) -> dict[str, float]:
    peaks: dict[str, float] = {}
    for row in cpu_rows:
        if row.process is not None:
            peaks[row.process] = max(peaks.get(row.process, 0.0), row.cpu_cores)
    return peaks


def _charts(out: Path, timeline, cpu_rows, steps: list[dict], with_journal: bool) -> dict[str, Path]:
    def series(column: str, rows=timeline) -> tuple[list, list]:
        kept = [(as_utc(row.time), row[column]) for row in rows if row[column] is not None]
        return [t for t, _ in kept], [v for _, v in kept]

    rate_series = {"asked": series("offered_per_s"), "confirmed (Locust PUSH)": series("confirmed_per_s"),
                   "delivered per subscriber (Locust)": series("delivered_per_subscriber_per_s"),
                   "sequenced by the backbone": series("backbone_pushes_per_s")}
    if with_journal:
        rate_series["received by the journal"] = series("journal_per_s")
    marks = [_utc(step["t_start"]) for step in steps]
    processes = sorted({row.process for row in cpu_rows if row.process is not None})
    labels = [step["name"] for step in steps]

    def per_step(key: str, scale: float = 1.0) -> list[float]:
        return [(step.get(key) or 0.0) * scale for step in steps]

    latency_series = {"publish→confirm p50": per_step("p50_ms"), "publish→confirm p99": per_step("p99_ms"),
                      "publish→deliver p50": per_step("deliver_p50_ms"), "publish→deliver p99": per_step("deliver_p99_ms")}
    if with_journal:
        latency_series["publish→journal p99"] = per_step("journal_p99_ms")
    return {
        "rates": charts.time_series(out / "capacity_rates.png", "asked vs delivered rate", "messages/s",
                                    rate_series, marks=marks),
        "loss": charts.category_bars(out / "capacity_loss.png", "loss per load phase", "% of expected deliveries",
                                     labels, {"before recovery": per_step("loss_before_recovery", 100),
                                              "after recovery": per_step("loss_after_recovery", 100)}),
        "latency": charts.category_bars(out / "capacity_latency.png", "latency per load phase", "ms",
                                        labels, latency_series),
        "cpu": charts.time_series(out / "capacity_cpu.png", "CPU per backbone process", "cores",
                                  {process: ([as_utc(r.time) for r in cpu_rows if r.process == process],
                                             [r.cpu_cores for r in cpu_rows if r.process == process])
                                   for process in processes}, marks=marks),
    }


def _html(out: Path, result: dict, paths: dict[str, Path]) -> Path:
    page = HtmlPage(f"fyrehose capacity report: {result['loadtest']}")
    page.facts({"shape": result["shape"], "subscribers": result["subscribers"],
                "max sustained rate (msgs/s)": result["max_sustained_rate"],
                "load generator": _generator(result),
                "loss before recovery": _percent(result["loss_before_recovery"]),
                "loss after recovery": _percent(result["loss_after_recovery"]),
                "journal": result["journal"] or "not given"})
    page.heading("Asked vs delivered")
    page.image(paths["rates"], "asked vs delivered rate over time")
    steps = result["steps"]
    journal = result["journal"] is not None
    page.table(
        ["phase", "asked/s", "sent/s", "delivered/s", "sequenced/s (backbone)", "dropped/s (backbone)",
         "loss before recovery", "loss after recovery", "sustained"] + (["journal/s"] if journal else []),
        [[s["name"], s["offered_rate"], s.get("sent_rate"), s["delivered_rate"], s.get("backbone_pushes_per_s"),
          s.get("backbone_dropped_per_s"), _percent(s["loss_before_recovery"]), _percent(s["loss_after_recovery"]),
          {True: "yes", False: "no", None: "–"}[s["sustained"]]] + ([s.get("journal_per_s")] if journal else [])
         for s in steps])
    page.heading("Loss")
    page.image(paths["loss"], "loss per phase")
    page.heading("Latency")
    page.table(["phase", "confirm p50 ms", "confirm p99 ms", "deliver p50 ms", "deliver p99 ms"]
               + (["journal p50 ms", "journal p99 ms"] if journal else []),
               [[s["name"], s["p50_ms"], s["p99_ms"], s["deliver_p50_ms"], s["deliver_p99_ms"]]
                + ([s.get("journal_p50_ms"), s.get("journal_p99_ms")] if journal else []) for s in steps])
    page.image(paths["latency"], "latency per phase")
    page.note("Whole run, from Locust's locust_stats.csv (ms; Locust rounds its CSV percentiles):")
    page.table(["type", "name", "requests", "failures", "p50", "p90", "p99", "p99.9", "max"],
               [[r["type"], r["name"], r.get("request_count"), r.get("failure_count"), r.get("p50"), r.get("p90"),
                 r.get("p99"), r.get("p99_9"), r.get("p100")] for r in result["latency"]], text_columns=(0, 1))
    page.heading("CPU per process")
    page.image(paths["cpu"], "CPU per backbone process over time")
    processes = sorted({name for s in steps for name in s["cpu_cores"]})
    if processes:
        page.table(["phase"] + [f"{name} (cores)" for name in processes],
                   [[s["name"]] + [s["cpu_cores"].get(name) for name in processes] for s in steps])
    else:
        page.note("No backbone CPU samples in metrics.jsonl (a load test against --backbone without --metrics-url).")
    page.note("Tables (Parquet, written by Spark): capacity_timeline.parquet (per second), capacity_steps.parquet, "
              "capacity_cpu.parquet, capacity_step_cpu.parquet, capacity_latency.parquet; capacity.json.")
    return page.write(out / "capacity.html")


def _generator(result: dict) -> str:
    """Whether the load generator sent what was asked (unknown in results written before it was recorded)."""
    if result["generator_shortfall"]:
        return "fell short: " + describe_shortfall(result["generator_shortfall"])
    return "not recorded" if result["max_sent_rate"] is None else "sent what was asked"


def _percent(value: float | None) -> str | None:
    return None if value is None else f"{value:.3%}"
