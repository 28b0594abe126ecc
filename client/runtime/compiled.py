"""Which modules run compiled, and the switch back to their source: ``FYREHOSE_PURE=1``.

The per-message modules listed in :data:`COMPILED_MODULES` are compiled with
Cython (pure-Python mode: the ``.py`` file is the source, a ``.pxd`` beside it
declares the machine types) when the package is installed and Cython is
there; the extension module then sits beside its ``.py`` and Python's own
import system prefers it.  The ``.py`` stays the reference: the oracle tests
(``tests/compiled/``) feed both the same input and require the same output.

:class:`SourceFinder`, installed first on ``sys.meta_path`` by the package's
``__init__``, hands out the ``.py`` instead of the extension module when

- ``FYREHOSE_PURE`` is set (to anything but empty or ``0``): every module runs
  from its source, to compare or to rule the compiled build out; or
- the ``.py`` was saved after its extension module was built (an edit in an
  editable install that was not rebuilt yet): stale machine code never runs.

For every other import it answers None after one set lookup, so it costs the
rest of the package nothing.  This module imports only the standard library:
``setup.py`` reads :data:`COMPILED_MODULES` from it before the package exists.
"""
from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Mapping, Sequence
from importlib.machinery import EXTENSION_SUFFIXES, ExtensionFileLoader, ModuleSpec, PathFinder
from pathlib import Path
from types import ModuleType

PURE_VARIABLE = "FYREHOSE_PURE"

# Compiled when the package is installed, each because the compiled build measured faster (docs/benchmarks.md).
COMPILED_MODULES = (
    "fyrehose.subjects.envelope",
    "fyrehose.subjects.selection",
    "fyrehose.protocol.codec",
    "fyrehose.protocol.frame_run",
    "fyrehose.backbone.pushes",
    "fyrehose.cache.core",
    "fyrehose.cache.merge",
    "fyrehose.gateways.nats.pub_scan",
    "fyrehose.gateways.nats.msg_frame",
    "fyrehose.backbone.core",
    "fyrehose.backbone.recent_log",
    "fyrehose.protocol.in_order",
    "fyrehose.gateways.redis.array_scan",
    "fyrehose.gateways.outbox",
)

# A source saved this long after its extension module was built is newer than the build.  Installing a wheel
# writes the files one after another within moments; an edit comes later.
STALE_AFTER_SECONDS = 2.0


def pure_requested(environ: Mapping[str, str] = os.environ) -> bool:
    return environ.get(PURE_VARIABLE, "") not in ("", "0")


class SourceFinder:
    """Finds the listed modules from their ``.py`` when pure is requested or their build is stale.

    A meta path finder (``find_spec``) without ``importlib.abc.MetaPathFinder``
    as its base: importing that module would pull in ``importlib.resources``,
    ``typing`` and ``tempfile`` before anything of the package loads.
    """

    def __init__(self, pure: bool, listed: Sequence[str] = COMPILED_MODULES) -> None:
        self.pure = pure
        self.listed = frozenset(listed)
        self.from_source: dict[str, str] = {}  # module -> why it runs from its source although it has a build

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None) -> ModuleSpec | None:
        if fullname not in self.listed or path is None:
            return None
        spec = PathFinder.find_spec(fullname, path)
        if spec is None or not isinstance(spec.loader, ExtensionFileLoader) or spec.origin is None:
            return spec
        built = Path(spec.origin)
        source = built.with_name(fullname.rpartition(".")[2] + ".py")
        if not source.exists():
            return spec
        if self.pure:
            reason = f"{PURE_VARIABLE} is set"
        elif newer_than(source, built):
            reason = f"{source.name} is newer than its build; tools/bootstrap or pip install rebuilds it"
        else:
            return spec
        self.from_source[fullname] = reason
        return importlib.util.spec_from_file_location(fullname, source)


def newer_than(source: Path, built: Path) -> bool:
    return source.stat().st_mtime > built.stat().st_mtime + STALE_AFTER_SECONDS


def stale() -> list[str]:
    """The listed modules whose build is older than their ``.py`` or ``.pxd``, or missing beside the others'
    builds (listed since): tools/bootstrap rebuilds then."""
    found = []
    unbuilt = []
    for name in COMPILED_MODULES:
        spec = PathFinder.find_spec(name, _parent_path(name))
        if spec is None or not isinstance(spec.loader, ExtensionFileLoader) or spec.origin is None:
            unbuilt.append(name)
            continue
        built = Path(spec.origin)
        stem = name.rpartition(".")[2]
        if any(newer_than(source, built) for source in (built.with_name(f"{stem}.py"), built.with_name(f"{stem}.pxd"))
               if source.exists()):
            found.append(name)
    return found + unbuilt if len(unbuilt) < len(COMPILED_MODULES) else found


def _parent_path(name: str) -> list[str]:
    return list(importlib.import_module(name.rpartition(".")[0]).__path__)


def install() -> SourceFinder:
    """Put the finder first on ``sys.meta_path`` (once per process) and return it."""
    for finder in sys.meta_path:
        if isinstance(finder, SourceFinder):
            return finder
    finder = SourceFinder(pure_requested())
    sys.meta_path.insert(0, finder)
    return finder


def load_source(name: str) -> ModuleType:
    """A fresh copy of listed module ``name`` run from its ``.py``, as ``NAME_source`` beside the imported one.

    What the oracle tests and ``fyrehose bench compiled`` compare the compiled
    build with: the same file, run by the interpreter.  Its imports of other
    modules of the package get the modules as imported (compiled or not).
    """
    built = importlib.import_module(name)
    source = Path(built.__file__ or "").with_name(name.rpartition(".")[2] + ".py")
    alias = f"{name}_source"
    spec = importlib.util.spec_from_file_location(alias, source)
    if spec is None or spec.loader is None:
        raise ImportError(f"no source file for {name} at {source}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[alias] = module  # dataclasses look their module up while the class body runs
    spec.loader.exec_module(module)
    return module


def is_compiled(module: ModuleType) -> bool:
    """True when ``module`` was loaded from an extension module (machine code), not from its source."""
    return (module.__file__ or "").endswith(tuple(EXTENSION_SUFFIXES))


def running_compiled() -> dict[str, bool]:
    """For each listed module, whether it runs compiled in this process (imports each: the answer is what runs)."""
    install()
    return {name: is_compiled(importlib.import_module(name)) for name in COMPILED_MODULES}


def describe() -> str:
    """One line for ``fyrehose --version``: which modules run compiled, or "all pure" and why."""
    finder = install()
    compiled = running_compiled()
    names = [name.removeprefix("fyrehose.") for name, yes in compiled.items() if yes]
    if not names:
        if finder.pure:
            return f"all pure ({PURE_VARIABLE} is set)"
        if finder.from_source:
            return f"all pure (the build is stale: {next(iter(finder.from_source.values()))})"
        return "all pure (no compiled build: the install found no Cython or no C compiler)"
    line = f"compiled with Cython: {', '.join(names)}"
    pure = [name.removeprefix("fyrehose.") + (f" ({finder.from_source[name]})" if name in finder.from_source else "")
            for name, yes in compiled.items() if not yes]
    if pure:
        line += f"; pure: {', '.join(pure)}"
    return line
