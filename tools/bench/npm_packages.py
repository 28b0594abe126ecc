"""Where the npm packages a benchmark runs (nats.js's bench script) are installed, wherever npm put them.

In order: the source tree's ``tools/node/node_modules`` (``tools/bootstrap
--test`` installs tools/node/package.json there; a pip install has none), the directory
``$FYREHOSE_NODE_MODULES`` names (a ``node_modules`` folder), then npm's own
local and global folders (``npm root``, ``npm root -g``).  The first that
holds the script and every package it requires is used.  When none does, the
error says in one line what to install and where: a pip install has no
tools/node, so the versions tools/node/package.json pins are repeated in
:data:`VERSIONS` (a test keeps them equal).
"""
from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from fyrehose.errors import CommandFailed

ENV = "FYREHOSE_NODE_MODULES"
SOURCE_TREE = Path(__file__).resolve().parents[1] / "node" / "node_modules"  # tools/node/node_modules
VERSIONS = {"nats": "2.29.3", "minimist": "^1.2.8"}  # as tools/node/package.json pins them
NPM_TIMEOUT = 30.0  # seconds for ``npm root``


@dataclass(frozen=True)
class NodeScript:
    """A script inside an npm package, and the packages it requires that the package does not depend on."""

    name: str  # what the messages call it
    package: str
    path: str  # inside the package
    needs: tuple[str, ...] = ()

    @property
    def packages(self) -> tuple[str, ...]:
        return (self.package, *self.needs)

    def found_in(self, node_modules: Path) -> bool:
        return (node_modules / self.package / self.path).is_file() and all(
            (node_modules / need / "package.json").is_file() for need in self.needs)


NATS_BENCH = NodeScript("nats.js", "nats", "examples/bench.js", needs=("minimist",))  # bench.js requires minimist


def npm_root(global_: bool) -> Path | None:
    """``npm root`` (``-g``: the global folder); None without npm or when it fails."""
    npm = shutil.which("npm")
    if npm is None:
        return None
    try:
        result = subprocess.run([npm, "root", *(["-g"] if global_ else [])], capture_output=True, text=True,
                                timeout=NPM_TIMEOUT, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = result.stdout.strip().splitlines()
    return Path(lines[-1].strip()) if result.returncode == 0 and lines else None


def candidates(source: Path | None = None, environ: Mapping[str, str] | None = None,
               root: Callable[[bool], Path | None] | None = None) -> Iterator[tuple[str, Path]]:
    """(where, node_modules folder), in the order they are searched; npm is asked only when reached.
    Defaults: :data:`SOURCE_TREE` (left out when absent, as in a pip install), ``os.environ``, :func:`npm_root`."""
    environ = os.environ if environ is None else environ
    root = npm_root if root is None else root
    source = SOURCE_TREE if source is None else source
    if source.is_dir():
        yield "the source tree", source
    if environ.get(ENV):
        yield f"${ENV}", Path(environ[ENV]).expanduser()
    for global_ in (False, True):
        folder = root(global_)
        if folder is not None:
            yield "npm root -g" if global_ else "npm root", folder


def locate(script: NodeScript, source: Path | None = None, environ: Mapping[str, str] | None = None,
           root: Callable[[bool], Path | None] | None = None) -> Path:
    """The first node_modules folder that holds ``script`` and what it requires; else CommandFailed saying
    what to install."""
    looked = []
    for where, folder in candidates(source, environ, root):
        if script.found_in(folder):
            return folder
        looked.append(f"{where} {folder}")
    raise CommandFailed(missing(script, looked, environ))


def missing(script: NodeScript, looked: list[str], environ: Mapping[str, str] | None = None) -> str:
    """One line: what was searched, and the npm command that installs the packages where they will be found."""
    environ = os.environ if environ is None else environ
    specs = " ".join(shlex.quote(f"{package}@{VERSIONS[package]}") for package in script.packages)
    given = Path(environ[ENV]).expanduser() if environ.get(ENV) else None
    if given is not None and given.name == "node_modules":  # install into the folder already named
        fix = f"npm install --prefix {shlex.quote(str(given.parent))} {specs}"
    else:
        fix = (f"npm install --prefix DIR {specs} and set {ENV}=DIR/node_modules "
               f"(or, global: npm install -g {specs})")
    where = f" (looked in {'; '.join(looked)})" if looked else ""
    return f"{script.name} not found{where}: {fix}"


def node() -> str:
    found = shutil.which("node")
    if found is None:
        raise CommandFailed("node is not installed (Debian package nodejs)")
    return found
