"""The publish time a message carries, as a Spark SQL expression over its payload.

Publish-to-journal latency needs the time a message was published, which
only the payload can tell.  The convention this pipeline supports (see
docs/pipeline.md, "Publish time"):

- the *data* is the payload itself, or, when the payload carries the fyrehose
  envelope (``FB 1E 01``, client/envelope.py), the envelope's data, found by
  walking its length fields exactly as :func:`fyrehose.envelope.decode` does;
- data starting with ``{`` is a JSON object: an integer ``"t_ns"`` (unix
  nanoseconds) or else a number ``"published_at"`` (unix seconds) is the
  publish time;
- data starting with the load tester's marker ``FHLT`` holds the publish time
  as 8 big-endian bytes of unix nanoseconds right after it
  (fyrehose.loadtest.stamp);
- anything else carries no publish time.  An 8-byte time at the start of an
  arbitrary payload is deliberately not guessed at: nothing distinguishes it
  from any other 8 bytes.

Times outside 1970..2255 are ignored.  Everything is built from Spark SQL
functions (no Python UDF), so it runs in the JVM on any executor.
"""
from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

MAX_PUBLISHED_US = 9 * 10**15  # 2255-03: keeps every conversion inside a signed 64-bit integer


def _uint(binary: str, position: str, length: int) -> str:
    """SQL for the unsigned big-endian integer of ``length`` bytes at 1-based ``position``."""
    return f"try_cast(conv(hex(substring({binary}, {position}, {length})), 16, 10) AS BIGINT)"


def envelope_data(payload: str = "payload") -> Column:
    """The data of a message: the envelope's data when the payload has one, else the payload; null if damaged."""
    p = f"`{payload}`"
    flags = _uint(p, "6", 1)
    after_subject = f"(8 + {_uint(p, '7', 2)})"
    after_reply = (f"({after_subject} + CASE WHEN ({flags} & 1) != 0 "
                   f"THEN 2 + {_uint(p, f'{after_subject} + 1', 2)} ELSE 0 END)")
    after_session = (f"({after_reply} + CASE WHEN ({flags} & 2) != 0 "
                     f"THEN 9 + {_uint(p, f'{after_reply} + 1', 1)} ELSE 0 END)")
    data_offset = (f"({after_session} + CASE WHEN ({flags} & 4) != 0 "
                   f"THEN 1 + {_uint(p, f'{after_session} + 1', 1)} ELSE 0 END)")
    is_envelope = (f"(substring({p}, 1, 3) = X'FB1E01' AND length({p}) >= 8 "
                   f"AND {_uint(p, '4', 1)} <= 7 AND {_uint(p, '5', 1)} <= 15)")
    return F.expr(
        f"CASE WHEN {is_envelope} THEN "
        f"  CASE WHEN {data_offset} <= length({p}) THEN substring({p}, {data_offset} + 1, length({p})) END "
        f"ELSE {p} END"
    )


def published_us(data: str) -> Column:
    """Unix microseconds of the publish time carried by the data column ``data`` (see the module doc), or null."""
    d = f"`{data}`"
    options = "map('allowSingleQuotes', 'false')"  # RFC 8259 JSON, not Spark's lenient default
    t_ns = f"from_json(CAST({d} AS STRING), 't_ns BIGINT', {options}).t_ns"
    seconds = f"from_json(CAST({d} AS STRING), 'published_at DOUBLE', {options}).published_at"
    stamp_ns = _uint(d, "5", 8)
    return F.expr(
        f"CASE "
        f"WHEN substring({d}, 1, 4) = X'46484C54' AND length({d}) >= 12 THEN "  # FHLT
        f"  CASE WHEN {stamp_ns} div 1000 < {MAX_PUBLISHED_US} THEN {stamp_ns} div 1000 END "
        f"WHEN substring({d}, 1, 1) = X'7B' THEN "  # {
        f"  CASE WHEN {t_ns} >= 0 AND {t_ns} div 1000 < {MAX_PUBLISHED_US} THEN {t_ns} div 1000 "
        f"       WHEN {seconds} >= 0 AND {seconds} < {MAX_PUBLISHED_US // 10**6} "
        f"         THEN CAST({seconds} * 1000000 AS BIGINT) END "
        f"END"
    )


def with_published_us(frame: DataFrame, payload: str = "payload", column: str = "published_us") -> DataFrame:
    """``frame`` with ``column``: the publish time (µs) its payloads carry, null where none."""
    return (frame.withColumn("__data", envelope_data(payload))
            .withColumn(column, published_us("__data"))
            .drop("__data"))
