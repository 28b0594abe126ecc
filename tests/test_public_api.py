"""The public face: what the docs show a script using imports from ``fyrehose``, the docs' Python examples run, and
modules that moved still import from their old names, with a warning naming the new one."""
from __future__ import annotations

import importlib
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import fyrehose
from fyrehose.runtime.moved import MOVED

from support import FYREHOSE, BackboneProcess, CacheProcess

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"```python\n(.*?)```", re.S)
EXAMPLE_ADDRESS = '("127.0.0.1", 2323)'


def examples() -> list[tuple[str, str]]:
    """(where, code) of every Python block that is a script using fyrehose (it imports it)."""
    found = []
    for path in DOCUMENTS:
        text = path.read_text()
        for match in BLOCK.finditer(text):
            code = match.group(1)
            if re.search(r"^(from|import) fyrehose", code, re.M):
                line = text.count("\n", 0, match.start()) + 1
                found.append((f"{path.relative_to(ROOT)}:{line}", code))
    return found


def test_every_name_in_all_is_there_and_every_documented_import_from_fyrehose_is_in_all():
    for name in fyrehose.__all__:
        assert getattr(fyrehose, name) is not None, name
    imported = set()
    for _, code in examples():
        for names in re.findall(r"^from fyrehose import (.+)$", code, re.M):
            imported.update(name.strip() for name in names.split(","))
        assert not re.search(r"^from fyrehose\.", code, re.M), "a docs example imports past the public face"
    assert imported and imported <= set(fyrehose.__all__), imported - set(fyrehose.__all__)


@pytest.mark.parametrize("old", sorted(MOVED))
def test_a_moved_module_imports_from_its_old_name_with_a_warning_naming_the_new_one(old):
    sys.modules.pop(old, None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = importlib.import_module(old)
    assert module is importlib.import_module(MOVED[old])
    assert [str(w.message).split(";")[0] for w in caught if w.category is DeprecationWarning] == \
        [f"{old} moved to {MOVED[old]}"]


def test_a_name_that_never_existed_is_still_an_import_error():
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("fyrehose.no_such_module")


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    """A backbone and a cache, as the examples expect one at 127.0.0.1:2323."""
    backbone = BackboneProcess(tmp_path_factory.mktemp("docs-backbone") / "state").start()
    try:
        with CacheProcess(backbone, tmp_path_factory.mktemp("docs-cache")):
            yield backbone
    finally:
        backbone.kill()


@pytest.mark.parametrize("where, code", examples(), ids=[where for where, _ in examples()])
def test_a_docs_example_runs(deployment, tmp_path, where, code):
    assert EXAMPLE_ADDRESS in code, f"{where}: examples connect to {EXAMPLE_ADDRESS}"
    script = code.replace(EXAMPLE_ADDRESS, repr(deployment.addr))
    if "users.json" in script:  # the signing example: its users database, made as the docs say
        made = subprocess.run(FYREHOSE + ["auth", "add", "--db", "users.json", "--user", "sam", "--service", "quotes",
                                          "--password-stdin"], input="example password\n", text=True,
                              capture_output=True, cwd=tmp_path, timeout=60)
        assert made.returncode == 0, made.stderr
    ran = subprocess.run([sys.executable, "-W", "error::DeprecationWarning", "-c", script], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, f"{where}:\n{ran.stderr}"
