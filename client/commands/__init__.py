"""The command line: one module per ``fyrehose`` command, each with ``add_arguments`` and ``run``."""
