"""Argument types the commands share, so every command refuses a bad number with the same one line."""
from __future__ import annotations

import argparse
from typing import Callable, TypeVar

Number = TypeVar("Number", int, float)


def _checked(kind: Callable[[str], Number], text: str, accept: Callable[[Number], bool], refusal: str) -> Number:
    try:
        value = kind(text)
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
