"""Reading the Prometheus text format the backbone's metrics endpoint serves.

Each sample is kept under its name with its labels exactly as exposed
(``fyrehose_dropped_total{reason="malformed"}``), which is the key the
capacity report looks values up by.
"""
from __future__ import annotations

from fyrehose.errors import InputError


class MetricsFormatError(InputError):
    pass


def parse_samples(text: str) -> dict[str, float]:
    """``{"name{labels}": value}`` for every sample line; comments, blank lines and timestamps are skipped."""
    samples = {}
    for number, line in enumerate(text.split("\n"), 1):  # not splitlines(): only \n ends a line
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if "{" in line:  # label values may hold spaces and braces; the numbers after the last "}" may not
            cut = line.rfind("}") + 1
            if not cut:
                raise MetricsFormatError(f"line {number}: unclosed labels in {line!r}")
            name, rest = line[:cut], line[cut:].split()
        else:
            name, *rest = line.split()
        if len(rest) not in (1, 2):  # VALUE [TIMESTAMP]
            raise MetricsFormatError(f"line {number}: expected NAME VALUE [TIMESTAMP], got {line!r}")
        try:
            samples[name] = float(rest[0])
        except ValueError:
            raise MetricsFormatError(f"line {number}: {rest[0]!r} is not a number") from None
    return samples
