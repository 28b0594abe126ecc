"""The shared argument types: what they accept, and the one line they refuse the rest with."""
from __future__ import annotations

import argparse

import pytest

from fyrehose.argtypes import non_negative_float, non_negative_int, positive_float, positive_int


@pytest.mark.parametrize("parse, text, value", [
    (positive_int, "1", 1), (positive_int, "65536", 65536), (positive_float, "0.5", 0.5),
    (non_negative_int, "0", 0), (non_negative_float, "0", 0.0), (non_negative_float, "2.5", 2.5),
])
def test_accepted(parse, text, value):
    assert parse(text) == value and type(parse(text)) is type(value)


@pytest.mark.parametrize("parse, text, message", [
    (positive_int, "0", "0 is not a positive integer"), (positive_int, "-3", "-3 is not a positive integer"),
    (positive_int, "1.5", "'1.5' is not an integer"), (positive_int, "x", "'x' is not an integer"),
    (positive_float, "0", "0 is not a positive number"), (positive_float, "nan", "nan is not a positive number"),
    (positive_float, "fast", "'fast' is not a number"),
    (non_negative_int, "-1", "-1 must not be negative"), (non_negative_float, "nan", "nan must not be negative"),
])
def test_refused_in_one_line(parse, text, message):
    with pytest.raises(argparse.ArgumentTypeError) as refused:
        parse(text)
    assert str(refused.value) == message
