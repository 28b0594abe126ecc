"""The I/O around the pure client session: the threaded ``Client`` and the gateways' gevent link."""
