"""The single-process backbone (``--workers 0``): one socket, one loop around the pure core."""
