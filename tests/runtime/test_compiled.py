"""Which modules run compiled, FYREHOSE_PURE, stale builds, and what ``fyrehose --version`` says about it."""
from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
import time
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

import pytest

from fyrehose.runtime import compiled

from support import FYREHOSE

ROOT = Path(__file__).resolve().parents[2]


def _run(code: str, **environ: str) -> str:
    env = {key: value for key, value in os.environ.items() if key != compiled.PURE_VARIABLE} | environ
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60,
                          check=True).stdout


def _built() -> bool:
    return any(compiled.is_compiled(importlib.import_module(name)) for name in compiled.COMPILED_MODULES)


def test_fyrehose_pure_runs_every_listed_module_from_its_py():
    files = _run("import importlib\nfrom fyrehose.runtime.compiled import COMPILED_MODULES\n"
                 "for name in COMPILED_MODULES: print(importlib.import_module(name).__file__)",
                 FYREHOSE_PURE="1").split()
    assert len(files) == len(compiled.COMPILED_MODULES)
    assert all(file.endswith(".py") for file in files), files


def test_version_names_the_compiled_modules_or_says_why_all_are_pure():
    env = {key: value for key, value in os.environ.items() if key != compiled.PURE_VARIABLE}
    normal = subprocess.run(FYREHOSE + ["--version"], capture_output=True, text=True, env=env, timeout=60)
    pure = subprocess.run(FYREHOSE + ["--version"], capture_output=True, text=True, env=env | {"FYREHOSE_PURE": "1"},
                          timeout=60)
    assert normal.returncode == pure.returncode == 0
    assert re.match(r"fyrehose \S+\n", normal.stdout)
    assert pure.stdout.splitlines()[1] == "all pure (FYREHOSE_PURE is set)"
    line = normal.stdout.splitlines()[1]  # without FYREHOSE_PURE, whatever this process runs with
    if line.startswith("compiled with Cython: "):
        assert "subjects.envelope" in line
    else:
        assert line.startswith("all pure (") and "FYREHOSE_PURE" not in line, line


def test_fyrehose_pure_zero_or_empty_means_not_set():
    assert not compiled.pure_requested({"FYREHOSE_PURE": "0"})
    assert not compiled.pure_requested({"FYREHOSE_PURE": ""})
    assert not compiled.pure_requested({})
    assert compiled.pure_requested({"FYREHOSE_PURE": "1"})


def _package(tmp_path: Path, name: str) -> tuple[Path, Path]:
    """A package ``name`` with a module ``fast`` both as .py and as an extension module file (never loaded)."""
    folder = tmp_path / name
    folder.mkdir()
    (folder / "__init__.py").write_text("")
    source = folder / "fast.py"
    source.write_text("WHERE = 'source'\n")
    built = folder / f"fast{EXTENSION_SUFFIXES[0]}"
    built.write_bytes(b"not a real extension: the finder only chooses, the test never loads it")
    return source, built


def test_the_finder_prefers_the_source_when_pure_or_stale_and_otherwise_stays_out(tmp_path):
    source, built = _package(tmp_path, "finderpkg")
    path = [str(source.parent)]
    name = "finderpkg.fast"
    now = time.time()
    os.utime(source, (now - 100, now - 100))
    os.utime(built, (now, now))

    spec = compiled.SourceFinder(pure=False, listed=[name]).find_spec(name, path)
    assert spec is not None and spec.origin == str(built)  # a fresh build is what runs
    pure = compiled.SourceFinder(pure=True, listed=[name])
    assert pure.find_spec(name, path).origin == str(source)
    assert pure.from_source == {name: "FYREHOSE_PURE is set"}
    assert compiled.SourceFinder(pure=True, listed=[]).find_spec(name, path) is None  # not listed: not its business

    os.utime(source, (now + 100, now + 100))  # edited after the build
    finder = compiled.SourceFinder(pure=False, listed=[name])
    assert finder.find_spec(name, path).origin == str(source)
    assert "newer than its build" in finder.from_source[name]


def test_a_module_without_a_build_is_found_as_usual(tmp_path):
    source, built = _package(tmp_path, "plainpkg")
    built.unlink()
    spec = compiled.SourceFinder(pure=False, listed=["plainpkg.fast"]).find_spec("plainpkg.fast", [str(source.parent)])
    assert spec is not None and spec.origin == str(source)


def test_the_source_copy_is_the_py_file_beside_the_imported_module():
    module = compiled.load_source("fyrehose.subjects.envelope")
    assert module.__file__ is not None and module.__file__.endswith("envelope.py")
    assert module.__name__ == "fyrehose.subjects.envelope_source"
    assert not compiled.is_compiled(module)
    assert module.Envelope is not importlib.import_module("fyrehose.subjects.envelope").Envelope


def test_every_compiled_module_has_oracle_tests_and_tests_that_run_pure():
    run_tests = (ROOT / "tools" / "run-tests").read_text()
    pure_tests = re.search(r"PURE_TESTS=\(([^)]*)\)", run_tests)
    assert pure_tests is not None
    listed = pure_tests.group(1).split()
    assert all((ROOT / path).is_file() for path in listed), listed
    oracles = "".join(path.read_text() for path in (ROOT / "tests" / "compiled").glob("test_*.py"))
    for name in compiled.COMPILED_MODULES:
        assert f'"{name}"' in oracles, f"no oracle test compares {name} with its .py"
        short = name.rpartition(".")[2]
        assert any(short in (ROOT / path).read_text() for path in listed), f"no test of {name} runs pure"


@pytest.mark.skipif(not _built(), reason="no compiled build here (installed without Cython, or FYREHOSE_PURE set)")
def test_nothing_is_stale_after_the_install():
    assert compiled.stale() == []
