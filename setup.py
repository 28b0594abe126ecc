"""Compiles the per-message modules with Cython when it is importable; setup.cfg holds all the metadata.

The modules are those of ``fyrehose.runtime.compiled.COMPILED_MODULES``, each
compiled from its own ``.py`` (Cython's pure-Python mode, machine types from
the ``.pxd`` beside it).  Compiling is optional: without Cython, or when a
module fails to compile, the install goes on and that module runs from its
``.py`` (a warning says which).  ``pip install -e .`` builds them in place,
beside their sources.
"""
from __future__ import annotations

import configparser
import hashlib
import importlib.util
import shutil
import sys
import sysconfig
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
BUILD = ROOT / "build" / "cython"


DIRECTIVES = {
    "language_level": 3,
    # The .pxd alone declares machine types: annotations stay for mypy, and no local is typed by inference
    # (an inferred bytearray local rejected a bytes value in a slice assignment that Python accepts).
    "annotation_typing": False,
    "infer_types": False,
    "binding": True,
}


def _warn(message: str) -> None:
    sys.stderr.write(f"fyrehose setup: warning: {message}; those modules run from their .py\n")


def _listed_modules() -> tuple[str, ...]:
    spec = importlib.util.spec_from_file_location("_fyrehose_compiled", ROOT / "client" / "runtime" / "compiled.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return tuple(module.COMPILED_MODULES)


def _package_dirs() -> dict[str, str]:
    """setup.cfg's package_dir: ``fyrehose`` is ``client/``, ``fyrehose.backbone`` is ``backbone/``, ..."""
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    pairs = (line.split("=", 1) for line in config["options"]["package_dir"].strip().splitlines())
    return {package.strip(): folder.strip() for package, folder in pairs}


def _source(module: str) -> str:
    """The ``.py`` of a module of the package."""
    folders = _package_dirs()
    package = max((name for name in folders if module.startswith(name + ".")), key=len)
    return str(Path(folders[package], *module[len(package) + 1:].split(".")).with_suffix(".py"))


def _staged(module: str) -> str:
    """The module's ``.py`` (and ``.pxd``) copied to where its package path is a real folder path.

    Cython takes a module's declarations from the ``.pxd`` beside its ``.py``
    only when the folders spell the module's dotted name; the source tree maps
    ``fyrehose`` onto ``client/`` (and ``fyrehose.backbone`` onto
    ``backbone/``), so each compiled module is laid out as
    ``build/cython/tree/fyrehose/...`` first.  A copy is rewritten only when
    its source changed, so an unchanged module is not compiled again.
    """
    parts = module.split(".")
    tree = BUILD / "tree"
    for depth in range(1, len(parts)):
        package = tree.joinpath(*parts[:depth])
        package.mkdir(parents=True, exist_ok=True)
        (package / "__init__.py").touch()
    source = ROOT / _source(module)
    target = tree.joinpath(*parts).with_suffix(".py")
    for origin, copy in ((source, target), (source.with_suffix(".pxd"), target.with_suffix(".pxd"))):
        if origin.exists():
            if not copy.exists() or copy.read_bytes() != origin.read_bytes():
                shutil.copyfile(origin, copy)
        elif copy.exists():
            copy.unlink()
    return str(target.relative_to(ROOT))


def extensions() -> list[Extension]:
    try:
        import Cython
        from Cython.Build import cythonize
    except ImportError:
        _warn("Cython is not installed, nothing is compiled")
        return []
    modules = [Extension(name, [_staged(name)]) for name in _listed_modules()]
    # C files of other directives or another Cython live in another folder: cythonize regenerates a C file only
    # when its .py or .pxd changed, never when the directives did.
    generated = BUILD / f"c-{hashlib.sha1(repr((DIRECTIVES, Cython.__version__)).encode()).hexdigest()[:12]}"
    try:
        return cythonize(modules, build_dir=str(generated), quiet=True, compiler_directives=DIRECTIVES)
    except Exception as exc:  # a Cython error in any module: install everything pure rather than fail
        _warn(f"Cython failed ({type(exc).__name__}: {exc})")
        return []


def _remove_unlisted(listed: set[str]) -> None:
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    for folder in ("client", "backbone", "loadtest", "tools"):
        for built in (ROOT / folder).rglob(f"*{suffix}"):
            module = _module_of(built.relative_to(ROOT), suffix)
            if module not in listed and built.with_name(built.name.removesuffix(suffix) + ".py").exists():
                built.unlink()


def _module_of(path: Path, suffix: str) -> str:
    """``client/subjects/envelope.SUFFIX`` -> ``fyrehose.subjects.envelope``, through setup.cfg's package_dir."""
    folders = {folder: package for package, folder in _package_dirs().items()}
    package = folders[path.parts[0]]
    return ".".join([package, *path.parts[1:-1], path.name.removesuffix(suffix)])


class OptionalBuildExt(build_ext):
    """A module the C compiler cannot build is left out with a warning, never a failed install.

    Built in place (the editable install), it first removes the extension
    modules of those no longer listed: one left beside its ``.py`` would
    still be imported instead of it.
    """

    def run(self) -> None:
        if self.inplace:
            _remove_unlisted({ext.name for ext in self.extensions})
        try:
            super().run()
        except Exception as exc:
            _warn(f"building the compiled modules failed ({type(exc).__name__}: {exc})")

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as exc:
            _warn(f"{ext.name} did not compile ({type(exc).__name__}: {exc})")


setup(ext_modules=extensions(), cmdclass={"build_ext": OptionalBuildExt})
