"""``python -m fyrehose``: the same as the ``fyrehose`` command."""
import sys

from fyrehose.cli import main

sys.exit(main())
