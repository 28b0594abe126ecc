"""Writing a job's result tables: one sorted Parquet file per table, read back from disk.

The tables a report writes are aggregates (windows, subjects, gaps), small
next to the journal: one file each, sorted, is what a reader wants, and
``repartition(1)`` (a shuffle) keeps the work before it parallel, unlike
``coalesce(1)``, which would pull the whole computation into one task.
Reading the written table back means later steps start from the result
instead of computing it again.
"""
from __future__ import annotations

from pathlib import Path

from pyspark.sql import DataFrame

from fyrehose.tools.pipeline.spark import readable_errors


def write_table(frame: DataFrame, path: Path, *order: str) -> DataFrame:
    """Write ``frame`` sorted by ``order`` as ``path`` (a Parquet folder, replaced); the table as written."""
    with readable_errors(f"writing {path}"):
        single = frame.repartition(1)
        if order:
            single = single.sortWithinPartitions(*order)
        single.write.mode("overwrite").parquet(str(path))
        return frame.sparkSession.read.parquet(str(path))
