"""The HTTP gateway's I/O: each client's driver, its SSE streams and backfills, what the connections share."""
