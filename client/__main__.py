"""``python -m fyrehose``: the same as the ``fyrehose`` command."""
import sys

from fyrehose.commands.main import main

sys.exit(main())
