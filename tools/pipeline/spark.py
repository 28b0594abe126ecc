"""The Spark session the jobs run in, and Spark's errors turned into one readable line.

``local[*]`` unless told otherwise; under ``spark-submit`` the master it was
given wins.  A local session binds to 127.0.0.1 and serves no UI (a
command-line job has no one to look at it).  The session's time zone is UTC
because the journal's partitions and every time window are UTC.
"""
from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from pyspark.sql import DataFrame, Row, SparkSession

from fyrehose.errors import CommandFailed

LOOPBACK = "127.0.0.1"
DEFAULT_MASTER = "local[*]"
SQL_CONF = {  # runtime settings: also applied to a session that is already running
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.sql.json.enablePartialResults": "true",  # a JSON field of the wrong type nulls that field only
}
START_CONF = {"spark.log.level": "FATAL", "spark.ui.showConsoleProgress": "false"}


class PipelineError(CommandFailed):
    """A job failed for a reason the user can act on; the message is one line."""


def aggregate_row(aggregated: DataFrame) -> Row:
    """The row of an aggregation over a whole frame (``agg`` without a grouping), which has exactly one."""
    row = aggregated.first()
    assert row is not None, "an aggregation over a whole frame has one row"
    return row


def _launched_by_spark_submit() -> bool:
    return "PYSPARK_GATEWAY_PORT" in os.environ


@contextmanager
def spark_session(master: str | None, app_name: str, conf: Mapping[str, str] | None = None) -> Iterator[SparkSession]:
    """A session for one job: the active one if there is one (left running), else a new one, stopped after."""
    conf = {**SQL_CONF, **(conf or {})}
    active = SparkSession.getActiveSession()
    if active is not None:
        for key, value in conf.items():
            active.conf.set(key, value)
        yield active
        return
    builder = SparkSession.builder.appName(app_name)
    if master is not None or not _launched_by_spark_submit():
        master = master or DEFAULT_MASTER
        builder = builder.master(master)
        if master.startswith("local"):
            os.environ.setdefault("SPARK_LOCAL_IP", LOOPBACK)
            builder = (builder.config("spark.driver.host", LOOPBACK)
                       .config("spark.driver.bindAddress", LOOPBACK)
                       .config("spark.ui.enabled", "false")
                       # Spark's default of 200 shuffle partitions is for clusters: on a few local cores
                       # the tasks' overhead dominates.
                       .config("spark.sql.shuffle.partitions", str(2 * (os.cpu_count() or 1))))
    for key, value in {**START_CONF, **conf}.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    try:
        yield session
    finally:
        session.stop()


def one_line(error: BaseException) -> str:
    """The first line of a Spark or Py4J error: the part that says what went wrong, without the stack."""
    java = getattr(error, "java_exception", None)
    text = java.toString() if java is not None else str(error)
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[0] if lines else type(error).__name__


@contextmanager
def readable_errors(what: str) -> Iterator[None]:
    """Re-raise Spark's multi-line errors as a one-line PipelineError naming ``what`` was being done."""
    from py4j.protocol import Py4JError
    from pyspark.errors import PySparkException

    try:
        yield
    except (PySparkException, Py4JError) as error:
        raise PipelineError(f"{what}: {one_line(error)}") from error
