"""``fyrehose pipeline``: the PySpark jobs over the journal's Parquet files and the load tests' results.

Every job reads and writes its data through Spark (so the same job runs on
``local[*]`` or on a cluster) and brings only small aggregates to the driver,
for the charts, the HTML report and ``summary.json``.  The jobs use Spark SQL
expressions only, never Python UDFs, so executors need no Python packages.
See docs/pipeline.md.
"""
