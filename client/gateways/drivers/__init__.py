"""The gateways' I/O: the gevent TCP server, each client's driver, the router on the backbone link, the process.

Everything else under ``fyrehose.gateways`` is pure (parsers, connections, access, outboxes); these drive it.
"""
