"""The durable journal: every message on disk in sequence order, served back to subscribers that lost it.

``fyrehose journal`` (see docs/journal.md) subscribes to the backbone, appends the
DELIVER datagrams as received to checksummed segment files, records permanent losses in a gap
index, answers FORWARDs from disk and hands sealed segments to the data
pipeline as Parquet.
"""
