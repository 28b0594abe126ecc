"""Gateways: backbone clients that serve unmodified TCP clients of other systems.

Each kind (Redis, NATS, Marlin, Lumberjack) is one module with ``add_arguments``
and ``run``; :mod:`fyrehose.commands.gateway` turns them into
``fyrehose gateway KIND --listen HOST:PORT --backbone HOST:PORT``.
"""
