"""The Prometheus text exposition format (version 0.0.4), read into samples by name.

Every fyrehose process serves its metrics in this format; ``fyrehose top``
reads them from endpoints it is pointed at, so a body that is not the format
(a wrong port, a proxy's error page, a truncated answer) is refused with the
line it broke on, never half-read.  Pure: text in, samples out.
"""
from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from fyrehose.errors import InputError

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
# Go's ParseFloat as Prometheus applies it to sample values, without Python's extras (underscores, "infinity").
_VALUE = re.compile(r"[+-]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|Inf|inf|NaN|nan)")
_TIMESTAMP = re.compile(r"-?\d+")
_BLANKS = re.compile(r"[ \t]+")  # the format's only separators (str.split would also split at \v, \f, \x1c...)
_ESCAPES = {"\\": "\\", '"': '"', "n": "\n"}

Labels = tuple[tuple[str, str], ...]  # sorted (name, value) pairs


class ExpositionError(InputError):
    """A body that is not the Prometheus text format."""


@dataclass
class Scrape:
    """One endpoint's samples: ``families[name]`` lists ``(labels, value)``."""

    families: dict[str, list[tuple[Labels, float]]] = field(default_factory=dict)

    def has(self, name: str) -> bool:
        return name in self.families

    def total(self, name: str, where: Mapping[str, str] | None = None) -> float | None:
        """The sum of the samples of ``name`` whose labels include ``where``; None when it has none."""
        values = [value for labels, value in self.families.get(name, ())
                  if not where or where.items() <= dict(labels).items()]
        return math.fsum(values) if values else None

    def by_label(self, name: str, label: str) -> dict[str, float]:
        """``{label value: sample}`` of the samples of ``name`` that carry ``label``."""
        found: dict[str, float] = {}
        for labels, value in self.families.get(name, ()):
            key = dict(labels).get(label)
            if key is not None:
                found[key] = found.get(key, 0.0) + value
        return found


def _labels(line: str, start: int, number: int) -> tuple[Labels, int]:
    """The label set that opens at ``line[start] == "{"``, and the index after its ``}``."""
    pairs: dict[str, str] = {}
    at = start + 1
    while True:
        while at < len(line) and line[at] in " \t":
            at += 1
        if line.startswith("}", at):
            return tuple(sorted(pairs.items())), at + 1
        name = _LABEL_NAME.match(line, at)
        if name is None:
            raise ExpositionError(f"line {number}: a label name was expected at column {at + 1}")
        at = name.end()
        while at < len(line) and line[at] in " \t":
            at += 1
        if not line.startswith("=", at):
            raise ExpositionError(f"line {number}: label {name.group()} needs =\"VALUE\"")
        at += 1
        while at < len(line) and line[at] in " \t":
            at += 1
        if not line.startswith('"', at):
            raise ExpositionError(f"line {number}: label {name.group()} needs =\"VALUE\"")
        at += 1
        value = []
        while True:
            if at >= len(line):
                raise ExpositionError(f"line {number}: the value of label {name.group()} is not closed")
            char = line[at]
            if char == '"':
                at += 1
                break
            if char == "\\":
                escaped = _ESCAPES.get(line[at + 1:at + 2])
                if escaped is None:
                    raise ExpositionError(f"line {number}: unknown escape in the value of label {name.group()}")
                value.append(escaped)
                at += 2
                continue
            value.append(char)
            at += 1
        if name.group() in pairs:
            raise ExpositionError(f"line {number}: label {name.group()} given twice")
        pairs[name.group()] = "".join(value)
        while at < len(line) and line[at] in " \t":
            at += 1
        if line.startswith(",", at):
            at += 1
        elif not line.startswith("}", at):
            raise ExpositionError(f"line {number}: ',' or '}}' expected after label {name.group()}")


def parse(text: str) -> Scrape:
    """Every sample of ``text``; comments (HELP and TYPE included) and blank lines are skipped."""
    scrape = Scrape()
    for number, line in enumerate(text.split("\n"), 1):  # not splitlines(): only \n ends a line
        line = line.strip(" \t")
        if not line or line.startswith("#"):
            continue
        name = _NAME.match(line)
        if name is None:
            raise ExpositionError(f"line {number}: a metric name was expected, got {line[:40]!r}")
        labels: Labels = ()
        at = name.end()
        if line.startswith("{", at):
            labels, at = _labels(line, at, number)
        rest = _BLANKS.split(line[at:].lstrip(" \t"))
        if (line[at:at + 1] not in (" ", "\t") or len(rest) > 2 or not _VALUE.fullmatch(rest[0])
                or (len(rest) == 2 and not _TIMESTAMP.fullmatch(rest[1]))):
            raise ExpositionError(f"line {number}: expected NAME[{{LABELS}}] VALUE [TIMESTAMP], got {line[:40]!r}")
        scrape.families.setdefault(name.group(), []).append((labels, float(rest[0])))
    return scrape
