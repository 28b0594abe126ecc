"""The pure code as oracle: a compiled module and its own ``.py`` must answer the same input the same way.

:func:`twins` gives the module as imported (compiled) and a fresh copy run
from its ``.py`` (``fyrehose.runtime.compiled.load_source``), or skips the
test when the module runs from its source here (no compiled build, or
``FYREHOSE_PURE`` set: then there is only one build, and the module's own
tests cover it).  :func:`outcome` runs a call and returns what it gave in a
form that compares across the two builds: their classes are distinct objects
of the same name, so values compare by class name and fields, exceptions by
class name and message.
"""
from __future__ import annotations

import dataclasses
import enum
import functools
import importlib
from array import array
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import pytest

from fyrehose.runtime.compiled import COMPILED_MODULES, is_compiled, load_source


@functools.cache
def _source(name: str) -> ModuleType:
    return load_source(name)


def twins(name: str) -> tuple[ModuleType, ModuleType]:
    """(compiled module, the same module run from its .py); skips when ``name`` does not run compiled here."""
    assert name in COMPILED_MODULES, f"{name} is not compiled by setup.py"
    built = importlib.import_module(name)
    if not is_compiled(built):
        pytest.skip(f"{name} runs from its .py here (no compiled build, or FYREHOSE_PURE is set): "
                    "there is no second build to compare")
    return built, _source(name)


def plain(value: Any, depth: int = 0) -> Any:
    """``value`` as plain data that compares equal across the two builds (class names instead of classes)."""
    if depth > 50:
        raise ValueError("value nested too deeply to compare")
    deeper = functools.partial(plain, depth=depth + 1)
    if value is None or isinstance(value, (bool, int, float, str)) and not isinstance(value, enum.Enum):
        return value
    if isinstance(value, enum.Enum):
        return (type(value).__name__, value.name, value.value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return (type(value).__name__, bytes(value))
    if isinstance(value, array):
        return ("array", value.typecode, value.tolist())
    if isinstance(value, range):
        return ("range", value.start, value.stop, value.step)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return (type(value).__name__, tuple(deeper(getattr(value, field.name)) for field in dataclasses.fields(value)))
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a NamedTuple
        return (type(value).__name__, tuple(map(deeper, value)))
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, [deeper(item) for item in value])
    if isinstance(value, dict):
        return ("dict", [(deeper(key), deeper(item)) for key, item in value.items()])
    if isinstance(value, (set, frozenset)):
        return (type(value).__name__, sorted(map(repr, map(deeper, value))))
    if isinstance(value, BaseException):
        return ("raised", type(value).__name__, str(value))
    if isinstance(value, Iterator):
        return ("iterator", [deeper(item) for item in value])
    raise TypeError(f"no plain form for {type(value).__name__}: compare its state explicitly")


def outcome(call: Callable[[], Any]) -> Any:
    """What ``call()`` returned, or the exception it raised, as :func:`plain` data."""
    try:
        return plain(call())
    except Exception as exc:  # the exception is the outcome being compared
        return plain(exc)


def same(built_call: Callable[[], Any], source_call: Callable[[], Any]) -> Any:
    """Both calls' outcomes, asserted equal; returns the outcome."""
    got, expected = outcome(built_call), outcome(source_call)
    assert got == expected
    return got
