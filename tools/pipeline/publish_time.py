"""The publish time a message carries, as a Spark SQL expression over its payload.

Publish-to-journal latency needs the time a message was published, which
only the payload can tell.  The convention this pipeline supports (see
docs/pipeline.md, "Publish time"):

- the *data* is the payload itself, or, when the payload carries the fyrehose
  envelope (``FB 1E 01``, client/subjects/envelope.py), the envelope's data, found by
  walking its length fields as :func:`fyrehose.subjects.envelope.decode` does (the
  subject's text is not validated: the journal's ``subject`` column already is);
- data starting with ``{`` is a JSON object (anything after it is ignored): an
  integer ``"t_ns"`` (unix nanoseconds) or else a number ``"published_at"``
  (unix seconds) is the publish time;
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

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

MAX_PUBLISHED_US = 9 * 10**15  # 2255-03: keeps every conversion inside a signed 64-bit integer


def _uint(binary: str, position: str, length: int) -> str:
    """SQL for the unsigned big-endian integer of ``length`` bytes at 1-based ``position``."""
    return f"try_cast(conv(hex(substring({binary}, {position}, {length})), 16, 10) AS BIGINT)"


def _steps(payload: str, column: str) -> list[tuple[str, str]]:
    """(column, SQL) pairs, each using the ones before it.

    One column per step keeps every expression small and computed once:
    Spark does not merge projections that would repeat a non-trivial
    expression, so each offset and the JSON parse are evaluated once per row.
    """
    p = f"`{payload}`"
    return [
        ("__envelope", f"substring({p}, 1, 3) = X'FB1E01' AND length({p}) >= 8 "
                       f"AND {_uint(p, '4', 1)} <= 7 AND {_uint(p, '5', 1)} <= 15"),
        ("__flags", f"CASE WHEN __envelope THEN {_uint(p, '6', 1)} END"),
        ("__after_subject", f"8 + {_uint(p, '7', 2)}"),
        ("__after_reply", f"__after_subject + CASE WHEN (__flags & 1) != 0 "
                          f"THEN 2 + {_uint(p, '__after_subject + 1', 2)} ELSE 0 END"),
        ("__after_session", f"__after_reply + CASE WHEN (__flags & 2) != 0 "
                            f"THEN 9 + {_uint(p, '__after_reply + 1', 1)} ELSE 0 END"),
        ("__data_offset", f"__after_session + CASE WHEN (__flags & 4) != 0 "
                          f"THEN 1 + {_uint(p, '__after_session + 1', 1)} ELSE 0 END"),
        ("__data", f"CASE WHEN NOT __envelope THEN {p} "
                   f"WHEN __data_offset <= length({p}) THEN substring({p}, __data_offset + 1, length({p})) END"),
        ("__stamp_ns", f"CASE WHEN substring(__data, 1, 4) = X'46484C54' AND length(__data) >= 12 "  # FHLT
                       f"THEN {_uint('__data', '5', 8)} END"),
        ("__json", "CASE WHEN substring(__data, 1, 1) = X'7B' THEN "  # {
                   "from_json(CAST(__data AS STRING), 't_ns BIGINT, published_at DOUBLE', "
                   "map('allowSingleQuotes', 'false')) END"),
        (column, f"CASE WHEN __stamp_ns div 1000 < {MAX_PUBLISHED_US} THEN __stamp_ns div 1000 "
                 f"WHEN __json.t_ns >= 0 AND __json.t_ns div 1000 < {MAX_PUBLISHED_US} THEN __json.t_ns div 1000 "
                 f"WHEN __json.published_at >= 0 AND __json.published_at < {MAX_PUBLISHED_US // 10**6} "
                 f"THEN CAST(__json.published_at * 1000000 AS BIGINT) END"),
    ]


def with_published_us(frame: DataFrame, payload: str = "payload", column: str = "published_us") -> DataFrame:
    """``frame`` with ``column``: the publish time (µs) its payloads carry, null where none."""
    steps = _steps(payload, column)
    for name, sql in steps:
        frame = frame.withColumn(name, F.expr(sql))
    return frame.drop(*(name for name, _ in steps[:-1]))
