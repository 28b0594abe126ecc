"""The shared argument types: what they accept, and the one line they refuse the rest with."""
from __future__ import annotations

import argparse

import pytest

from fyrehose.runtime.argtypes import (
    duration,
    non_negative_duration,
    non_negative_float,
    non_negative_int,
    positive_duration,
    positive_float,
    positive_int,
    publish_timeout,
    whole_seconds,
)


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


@pytest.mark.parametrize("text, seconds", [
    ("15", 15.0), ("0.5", 0.5), ("15s", 15.0), ("1m30s", 90.0), ("1h", 3600.0), ("500ms", 0.5),
    ("2h10m5s", 7805.0), ("1.5m", 90.0), ("1d", 86400.0), (" 30s ", 30.0),
])
def test_duration_accepts_seconds_and_locust_style(text, seconds):
    assert duration(text) == seconds and positive_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "s", "15x", "1m30", "m1", "15 s", "1h-5m", "--1s"])
def test_duration_refuses_other_text_in_one_line(text):
    with pytest.raises(argparse.ArgumentTypeError) as refused:
        duration(text)
    assert str(refused.value) == f"{text!r} is not a duration (seconds, or like 15s, 1m30s, 1h, 500ms)"


def test_duration_bounds():
    assert non_negative_duration("0s") == 0.0
    with pytest.raises(argparse.ArgumentTypeError, match="0s is not a positive duration"):
        positive_duration("0s")
    with pytest.raises(argparse.ArgumentTypeError, match="-1 must not be negative"):
        non_negative_duration("-1")


def test_whole_seconds():
    assert whole_seconds("1m") == 60 and whole_seconds("90") == 90
    with pytest.raises(argparse.ArgumentTypeError, match="1500ms is not a whole number of seconds"):
        whole_seconds("1500ms")


def test_publish_timeout_is_a_duration_up_to_the_backbones_memory_of_retries():
    assert publish_timeout("25") == 25.0 and publish_timeout("1500ms") == 1.5
    with pytest.raises(argparse.ArgumentTypeError, match=r"must be in \(0, 25\] seconds"):
        publish_timeout("26s")
    with pytest.raises(argparse.ArgumentTypeError, match="0 is not a positive duration"):
        publish_timeout("0")
