"""Argument types the commands share, so every command refuses a bad number with the same one line."""
from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from typing import TypeVar

from fyrehose.protocol.publishing import MAX_PUBLISH_TIMEOUT

Number = TypeVar("Number", int, float)


def _checked(kind: Callable[[str], Number], text: str, accept: Callable[[Number], bool], refusal: str) -> Number:
    try:
        value = kind(text)
    except argparse.ArgumentTypeError:
        raise
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {'an integer' if kind is int else 'a number'}") from None
    if not accept(value):  # written so that nan is refused too
        raise argparse.ArgumentTypeError(f"{text} {refusal}")
    return value


def positive_int(text: str) -> int:
    return _checked(int, text, lambda value: value >= 1, "is not a positive integer")


def positive_float(text: str) -> float:
    return _checked(float, text, lambda value: value > 0, "is not a positive number")


def non_negative_int(text: str) -> int:
    return _checked(int, text, lambda value: value >= 0, "must not be negative")


def non_negative_float(text: str) -> float:
    return _checked(float, text, lambda value: value >= 0, "must not be negative")


_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ms|s|m|h|d)")
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def duration(text: str) -> float:
    """Seconds from plain seconds (``15``, ``0.5``) or Locust-style parts (``15s``, ``1m30s``, ``1h``, ``500ms``).

    Users of Locust type ``--run-time 1m30s``; every duration option takes that
    form as well as the plain number older scripts pass.
    """
    stripped = text.strip()
    try:
        return float(stripped)
    except ValueError:
        pass
    position, total = 0, 0.0
    while position < len(stripped):
        part = _DURATION_PART.match(stripped, position)
        if part is None:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not a duration (seconds, or like 15s, 1m30s, 1h, 500ms)")
        total += float(part.group(1)) * _DURATION_UNITS[part.group(2)]
        position = part.end()
    if not stripped:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration (seconds, or like 15s, 1m30s, 1h, 500ms)")
    return total


def positive_duration(text: str) -> float:
    return _checked(duration, text, lambda value: value > 0, "is not a positive duration")


def non_negative_duration(text: str) -> float:
    return _checked(duration, text, lambda value: value >= 0, "must not be negative")


def whole_seconds(text: str) -> int:
    """A positive duration that is a whole number of seconds (time windows counted in seconds)."""
    value = positive_duration(text)
    if value != int(value):
        raise argparse.ArgumentTypeError(f"{text} is not a whole number of seconds")
    return int(value)


def publish_timeout(text: str) -> float:
    """A publish's wait for its CONFIRM (``--timeout``, ``--publish-timeout``): up to the backbone's memory of retries."""
    value = positive_duration(text)
    if value > MAX_PUBLISH_TIMEOUT:
        raise argparse.ArgumentTypeError(f"must be in (0, {MAX_PUBLISH_TIMEOUT:g}] seconds "
                                         "(the backbone's memory of retries)")
    return value
