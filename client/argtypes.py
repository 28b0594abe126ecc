"""Argument types the commands share, so every command refuses a bad number with the same one line."""
from __future__ import annotations

import argparse


def _parse(kind: type, text: str) -> int | float:
    try:
        return kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {'an integer' if kind is int else 'a number'}") from None


def positive_int(text: str) -> int:
    value = _parse(int, text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a positive integer")
    return value


def positive_float(text: str) -> float:
    value = _parse(float, text)
    if not value > 0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"{text} is not a positive number")
    return value


def non_negative_int(text: str) -> int:
    value = _parse(int, text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text} must not be negative")
    return value


def non_negative_float(text: str) -> float:
    value = _parse(float, text)
    if not value >= 0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"{text} must not be negative")
    return value
