"""``fyrehose loadtest``: Locust users that speak the fyrehose protocol, and the capacity results of a run.

Pure parts (no Locust, no I/O): ``rates`` (load shapes, pacing), ``stamp``
(payload publish times), ``tally`` (mergeable per-phase counts and latency
histograms), ``account`` and ``measuring_subscriber`` (a measuring subscriber), ``results``
(verdicts, summary), ``settings``, ``prometheus``.  Drivers: ``users`` (the
Locust users), ``coordination`` and ``locustfile`` (Locust processes and their
messages), ``sampler`` (metrics scraping), ``command`` (the CLI).
"""
