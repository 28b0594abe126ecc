"""``pipeline export``: the journal's messages, filtered by subject pattern and time, as Parquet or JSON lines.

Spark writes the result in parallel, ordered by sequence (part files in name
order, rows in each file in order):

- ``parquet``: ``OUT/parquet/date=YYYY-MM-DD/hour=HH/part-*.parquet`` with the
  journal's own columns, so an export is itself a journal the pipeline reads;
- ``jsonl``: ``OUT/jsonl/part-*.json``, one object per line: ``seq``,
  ``received_at`` (ISO-8601 UTC, microseconds), ``subject`` (absent for raw
  payloads), ``payload`` (base64) and ``size``.

The folder of the chosen format is replaced; nothing else in OUT is touched.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from fyrehose.tools.pipeline.journal import COLUMNS, read_journal
from fyrehose.tools.pipeline.spark import readable_errors
from fyrehose.tools.pipeline.subject_regex import pattern_regex
from fyrehose.tools.pipeline.timerange import TimeRange

FORMATS = ("parquet", "jsonl")
JSON_TIMESTAMP = "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX"


@dataclass(frozen=True)
class ExportOptions:
    journal: Path
    out: Path
    format: str
    subject: str | None = None  # a subscription pattern: a.b, a.*, a.>
    time_range: TimeRange = TimeRange()


def selected(spark: SparkSession, options: ExportOptions) -> DataFrame:
    """The journal rows the options select, with the journal's columns and the partition columns."""
    rows = read_journal(spark, options.journal, options.time_range)
    if options.subject is not None:
        rows = rows.where(F.col("subject").rlike(pattern_regex(options.subject)))
    return rows


def run_export(spark: SparkSession, options: ExportOptions) -> Path:
    """Write the selection; returns the folder written (``OUT/parquet`` or ``OUT/jsonl``)."""
    if options.format not in FORMATS:
        raise ValueError(f"format must be one of {', '.join(FORMATS)}")
    rows = selected(spark, options)
    target = options.out / options.format
    with readable_errors(f"exporting to {target}"):
        if options.format == "parquet":
            (rows.select(*COLUMNS, F.date_format("received_at", "yyyy-MM-dd").alias("date"),
                         F.date_format("received_at", "HH").alias("hour"))
             .orderBy("seq")
             .write.mode("overwrite").partitionBy("date", "hour").parquet(str(target)))
        else:
            (rows.select(*COLUMNS).orderBy("seq")
             .write.mode("overwrite").option("timestampFormat", JSON_TIMESTAMP).json(str(target)))
    return target
