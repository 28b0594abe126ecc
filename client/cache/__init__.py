"""The last-value cache: a record per subject, answering snapshot and subscription-start requests.

:mod:`fyrehose.cache.core` is the pure state machine (envelopes and time in,
envelopes to publish out); :mod:`fyrehose.commands.cache` is ``fyrehose cache``,
its driver on a :class:`fyrehose.Client`.
"""
from fyrehose.cache.core import Cache, Record

__all__ = ["Cache", "Record"]
