"""Watching a running deployment from its metrics endpoints: ``fyrehose top`` (docs/operations.md)."""
