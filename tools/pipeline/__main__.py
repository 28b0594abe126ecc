"""``python -m fyrehose.tools.pipeline JOB ...``, and the file to hand to ``spark-submit`` on a cluster.

``spark-submit --master spark://HOST:7077 .../fyrehose/tools/pipeline/__main__.py report --journal DIR --out DIR``
runs the same job as ``fyrehose pipeline report``, in the session spark-submit
prepared (see docs/pipeline.md).
"""
import sys

from fyrehose.commands.main import main

if __name__ == "__main__":
    sys.exit(main(["pipeline", *sys.argv[1:]]))
