"""``fyrehose bench``: side-by-side throughput and latency of fyrehose, Redis pub/sub and NATS.

The pure parts (wire layouts, stream scanners, pacing, the rate search,
statistics) are separate from the drivers that own sockets and processes, so
every rule of the measurement is tested without a network.
"""
