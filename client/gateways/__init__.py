"""Gateways: backbone clients that serve unmodified TCP clients of other systems.

Pure but for :mod:`fyrehose.gateways.drivers`, their I/O: each protocol's folder
(``redis``, ``nats``, ``marlin``, ``http``, ``lumberjack``) holds its parser and
its connections' state machine, and what they share (access, outboxes, requests,
channels, ...) is here.  :mod:`fyrehose.commands.gateway` has one module per kind
(``add_arguments`` and ``run``): ``fyrehose gateway KIND --listen HOST:PORT
--backbone HOST:PORT``.
"""
