"""Reading a journal directory into Spark: its Parquet files and its own record of permanent losses.

The journal's layout and schema are fixed (docs/journal.md): Parquet under
``DIR/parquet/date=YYYY-MM-DD/hour=HH/seg-*.parquet`` and the gap index
``DIR/gaps.jsonl``.  Spark discovers the ``date``/``hour`` partition columns
from the folder names (``basePath``), so a time filter given here becomes a
partition filter and whole hours are skipped unread.  A journal that does
not look like one is refused with a one-line PipelineError before any job runs.
"""
from __future__ import annotations

from pathlib import Path

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from fyrehose.tools.pipeline.spark import PipelineError, readable_errors
from fyrehose.tools.pipeline.timerange import TimeRange

COLUMNS = {
    "seq": T.LongType(),
    "received_at": T.TimestampType(),
    "subject": T.StringType(),
    "payload": T.BinaryType(),
    "size": T.IntegerType(),
}
PARTITIONS = {"date": T.DateType(), "hour": T.IntegerType()}
GAPS_SCHEMA = "from_seq BIGINT, to_seq BIGINT, recorded_at STRING"
ALL_TIME = TimeRange()  # no bound on either side


def parquet_root(journal: Path) -> Path:
    return journal / "parquet"


def check_journal(journal: Path) -> Path:
    """The journal's Parquet root, or PipelineError when ``journal`` holds no exported Parquet file."""
    if not journal.is_dir():
        raise PipelineError(f"journal {journal}: no such directory")
    root = parquet_root(journal)
    if not any(root.glob("date=*/hour=*/*.parquet")):
        raise PipelineError(f"journal {journal}: no Parquet files under {root}/date=YYYY-MM-DD/hour=HH/ "
                            f"(write them with: fyrehose journal export --seal {journal})")
    return root


def _check_schema(frame: DataFrame, where: Path) -> None:
    fields = {field.name: field.dataType for field in frame.schema.fields}
    for name, wanted in {**COLUMNS, **PARTITIONS}.items():
        if name not in fields:
            raise PipelineError(f"journal {where}: column {name!r} is missing")
        if fields[name] != wanted:
            raise PipelineError(f"journal {where}: column {name!r} is {fields[name].simpleString()}, "
                                f"expected {wanted.simpleString()}")


def partition_filter(time_range: TimeRange) -> Column | None:
    """A condition on the ``date``/``hour`` columns alone that keeps every partition the range can touch."""
    conditions = []
    first = time_range.first_partition()
    if first is not None:
        day, hour = first
        conditions.append((F.col("date") > F.lit(day)) | ((F.col("date") == F.lit(day)) & (F.col("hour") >= hour)))
    last = time_range.last_partition()
    if last is not None:
        day, hour = last
        conditions.append((F.col("date") < F.lit(day)) | ((F.col("date") == F.lit(day)) & (F.col("hour") <= hour)))
    if not conditions:
        return None
    return conditions[0] if len(conditions) == 1 else conditions[0] & conditions[1]


def read_journal(spark: SparkSession, journal: Path, time_range: TimeRange = ALL_TIME) -> DataFrame:
    """The journal's rows received within ``time_range``, with the ``date`` and ``hour`` partition columns."""
    root = check_journal(journal)
    with readable_errors(f"reading journal {journal}"):
        frame = spark.read.option("basePath", str(root)).parquet(str(root))
    _check_schema(frame, journal)
    pruning = partition_filter(time_range)
    if pruning is not None:
        frame = frame.where(pruning)
    if time_range.start is not None:
        frame = frame.where(F.col("received_at") >= F.lit(time_range.start))
    if time_range.end is not None:
        frame = frame.where(F.col("received_at") < F.lit(time_range.end))
    return frame


def read_recorded_gaps(spark: SparkSession, journal: Path) -> DataFrame | None:
    """The journal's own ``gaps.jsonl`` (from_seq, to_seq, recorded_at), or None when it has none."""
    path = journal / "gaps.jsonl"
    if not path.is_file() or path.stat().st_size == 0:
        return None
    with readable_errors(f"reading {path}"):
        return (spark.read.schema(GAPS_SCHEMA).option("mode", "DROPMALFORMED").json(str(path))
                .where(F.col("from_seq").isNotNull() & F.col("to_seq").isNotNull()))
