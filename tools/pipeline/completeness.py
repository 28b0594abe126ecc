"""Sequence completeness: the exact missing ranges between the first and last sequence, and the duplicates.

The obvious form, ``lag(seq)`` over a window ordered by seq, has no partition
key, so Spark moves every row into one task.  Instead the sequence space is
cut into buckets of ``bucket_size`` consecutive numbers: gaps inside a
bucket come from a window partitioned by bucket (buckets sort in parallel),
and gaps that straddle buckets from the buckets' edges (one row per
non-empty bucket, the only global ordering left).  The result is the same
exact list of ranges on one core or on a cluster.
"""
from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

DEFAULT_BUCKET_SIZE = 1 << 20


def sequence_copies(rows: DataFrame) -> DataFrame:
    """One row per distinct seq: ``seq``, ``copies`` (rows holding it) and its first ``received_at``."""
    return rows.groupBy("seq").agg(F.count(F.lit(1)).alias("copies"), F.min("received_at").alias("received_at"))


def duplicates(copies: DataFrame) -> DataFrame:
    """The sequences held more than once: ``seq``, ``copies``."""
    return copies.where(F.col("copies") > 1).select("seq", "copies")


def missing_ranges(copies: DataFrame, bucket_size: int = DEFAULT_BUCKET_SIZE) -> DataFrame:
    """Inclusive missing ranges: ``from_seq``, ``to_seq``, ``missing``, and the receive times around each gap.

    ``seen_before`` is when the last sequence before the gap was received,
    ``seen_after`` when the first one after it was: where the gap sits in time.
    """
    if bucket_size < 1:
        raise ValueError("bucket_size must be at least 1")
    bucketed = copies.select("seq", "received_at", F.expr(f"seq div {int(bucket_size)}").alias("bucket"))
    within = Window.partitionBy("bucket").orderBy("seq")
    inner = (bucketed
             .select("seq", "received_at",
                     F.lag("seq").over(within).alias("prev_seq"),
                     F.lag("received_at").over(within).alias("prev_received_at"))
             .where(F.col("seq") - F.col("prev_seq") > 1)
             .select((F.col("prev_seq") + 1).alias("from_seq"), (F.col("seq") - 1).alias("to_seq"),
                     F.col("prev_received_at").alias("seen_before"), F.col("received_at").alias("seen_after")))
    edges = bucketed.groupBy("bucket").agg(
        F.min("seq").alias("low"), F.max("seq").alias("high"),
        F.min_by("received_at", "seq").alias("low_received_at"),
        F.max_by("received_at", "seq").alias("high_received_at"),
    )
    across = Window.orderBy("bucket")  # one row per non-empty bucket: small enough for one task
    straddling = (edges
                  .select("low", "low_received_at",
                          F.lag("high").over(across).alias("prev_high"),
                          F.lag("high_received_at").over(across).alias("prev_high_received_at"))
                  .where(F.col("low") - F.col("prev_high") > 1)
                  .select((F.col("prev_high") + 1).alias("from_seq"), (F.col("low") - 1).alias("to_seq"),
                          F.col("prev_high_received_at").alias("seen_before"),
                          F.col("low_received_at").alias("seen_after")))
    return (inner.unionByName(straddling)
            .withColumn("missing", F.col("to_seq") - F.col("from_seq") + 1)
            .select("from_seq", "to_seq", "missing", "seen_before", "seen_after"))


def recorded_coverage(gaps: DataFrame, recorded: DataFrame) -> DataFrame:
    """The journal's recorded ranges, each with how many of its sequences the computed gaps confirm missing."""
    overlap = recorded.alias("r").join(
        gaps.alias("g"),
        (F.col("g.from_seq") <= F.col("r.to_seq")) & (F.col("g.to_seq") >= F.col("r.from_seq")),
        "left",
    )
    confirmed = F.greatest(F.least("g.to_seq", "r.to_seq") - F.greatest("g.from_seq", "r.from_seq") + 1, F.lit(0))
    return (overlap.groupBy("r.from_seq", "r.to_seq", "r.recorded_at")
            .agg(F.coalesce(F.sum(confirmed), F.lit(0)).alias("confirmed_missing"))
            .select("from_seq", "to_seq", "recorded_at",
                    (F.col("to_seq") - F.col("from_seq") + 1).alias("recorded_missing"), "confirmed_missing"))
