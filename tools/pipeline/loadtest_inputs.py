"""Reading a load test's results directory (``fyrehose loadtest --out DIR``) into Spark frames.

The files and their columns are those docs/loadtest.md lists: Locust's CSVs
(``locust_stats.csv``, ``locust_stats_history.csv``), the backbone's metric
samples (``metrics.jsonl``), one line per load phase (``steps.jsonl``) and the
run's ``summary.json``.  Locust's column names (``Requests/s``, ``99.9%``) are
normalised to identifiers (``requests_s``, ``p99_9``), and every number is
read with ``try_cast`` so Locust's ``N/A`` becomes null instead of an error.
"""
from __future__ import annotations

import re
from pathlib import Path

from pyspark.sql import DataFrame, Row, SparkSession, Window
from pyspark.sql import functions as F

from fyrehose.tools.pipeline.spark import PipelineError, readable_errors

REQUIRED = ("steps.jsonl", "summary.json", "locust_stats.csv", "locust_stats_history.csv")
STEPS_SCHEMA = (
    "name STRING, t_start DOUBLE, t_end DOUBLE, offered_rate DOUBLE, delivered_rate DOUBLE, confirmed_rate DOUBLE, "
    "loss_before_recovery DOUBLE, loss_after_recovery DOUBLE, expected BIGINT, missed_before_recovery BIGINT, "
    "lost_after_recovery BIGINT, p50_ms DOUBLE, p99_ms DOUBLE, deliver_p50_ms DOUBLE, deliver_p99_ms DOUBLE, "
    "requests BIGINT, failures BIGINT, sustained BOOLEAN, reasons ARRAY<STRING>, "
    # added later (null in older results): the rate the publishers actually sent, and whether it fell short
    "sent_rate DOUBLE, generator_fell_short BOOLEAN"
)
METRICS_SCHEMA = "t DOUBLE, metrics MAP<STRING, DOUBLE>"


def check_loadtest(directory: Path) -> None:
    if not directory.is_dir():
        raise PipelineError(f"load test results {directory}: no such directory")
    absent = [name for name in REQUIRED if not (directory / name).is_file()]
    if absent:
        raise PipelineError(f"load test results {directory}: missing {', '.join(absent)} "
                            "(written by fyrehose loadtest --out DIR)")


def column_name(header: str) -> str:
    """``Requests/s`` -> ``requests_s``, ``99.9%`` -> ``p99_9``, ``User Count`` -> ``user_count``."""
    header = header.strip()
    if header.endswith("%"):
        return "p" + header[:-1].replace(".", "_")
    return re.sub(r"[^0-9a-z]+", "_", header.lower()).strip("_")


def _number(name: str, kind: str = "DOUBLE") -> F.Column:
    return F.expr(f"try_cast(`{name}` AS {kind})").alias(name)


def _csv(spark: SparkSession, path: Path) -> DataFrame:
    with readable_errors(f"reading {path}"):
        frame = spark.read.option("header", True).csv(str(path))
    return frame.toDF(*(column_name(header) for header in frame.columns))


def read_stats(spark: SparkSession, directory: Path) -> DataFrame:
    """``locust_stats.csv``: one row per request type and name (and the Aggregated row)."""
    frame = _csv(spark, directory / "locust_stats.csv")
    numbers = [name for name in frame.columns if name not in ("type", "name")]
    return frame.select(F.coalesce(F.col("type"), F.lit("")).alias("type"), "name",
                        *(_number(name) for name in numbers))


def read_history(spark: SparkSession, directory: Path) -> DataFrame:
    """``locust_stats_history.csv``: per second and request type, the current rate and percentiles."""
    frame = _csv(spark, directory / "locust_stats_history.csv")
    missing = {"timestamp", "type", "name", "requests_s"} - set(frame.columns)
    if missing:
        raise PipelineError(f"{directory / 'locust_stats_history.csv'}: no column {', '.join(sorted(missing))}")
    numbers = [name for name in frame.columns if name not in ("timestamp", "type", "name")]
    return frame.select(_number("timestamp", "BIGINT").alias("second"),
                        F.coalesce(F.col("type"), F.lit("")).alias("type"), "name",
                        *(_number(name) for name in numbers))


def read_steps(spark: SparkSession, directory: Path) -> DataFrame:
    """``steps.jsonl`` with a ``step`` number (1, 2, ... by start time) and a name for every phase."""
    path = directory / "steps.jsonl"
    with readable_errors(f"reading {path}"):
        frame = spark.read.schema(STEPS_SCHEMA).json(str(path))
    frame = frame.where(F.col("t_start").isNotNull() & F.col("t_end").isNotNull())
    numbered = frame.withColumn("step", F.row_number().over(Window.orderBy("t_start")))  # a few rows
    return numbered.withColumn("name", F.coalesce("name", F.concat(F.lit("step "), F.col("step").cast("string"))))


def read_summary(spark: SparkSession, directory: Path) -> Row:
    path = directory / "summary.json"
    with readable_errors(f"reading {path}"):
        row = spark.read.option("multiLine", True).json(str(path)).first()
    if row is None:
        raise PipelineError(f"{path}: empty")
    return row


def read_metric_samples(spark: SparkSession, directory: Path) -> DataFrame:
    """``metrics.jsonl`` as long rows: ``t``, ``key`` (name with labels), ``name``, ``process``, ``value``."""
    path = directory / "metrics.jsonl"
    if not path.is_file():
        return spark.createDataFrame([], "t DOUBLE, key STRING, name STRING, process STRING, value DOUBLE")
    with readable_errors(f"reading {path}"):
        frame = spark.read.schema(METRICS_SCHEMA).json(str(path))
    return (frame.where(F.col("t").isNotNull())
            .select("t", F.explode("metrics").alias("key", "value"))
            .select("t", "key",
                    F.regexp_extract("key", r"^([^{]+)", 1).alias("name"),
                    F.nullif(F.regexp_extract("key", r'process="([^"]*)"', 1), F.lit("")).alias("process"),
                    "value"))


def counter_rates(samples: DataFrame) -> DataFrame:
    """Per-second rates of every counter (``*_total``) between consecutive samples; a reset gives no rate."""
    previous = Window.partitionBy("key").orderBy("t")
    return (samples.where(F.col("name").endswith("_total"))
            .withColumn("dt", F.col("t") - F.lag("t").over(previous))
            .withColumn("dv", F.col("value") - F.lag("value").over(previous))
            .where((F.col("dt") > 0) & (F.col("dv") >= 0))
            .select("t", F.floor("t").cast("bigint").alias("second"), "key", "name", "process",
                    (F.col("dv") / F.col("dt")).alias("rate")))
