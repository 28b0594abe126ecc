"""Where ``fyrehose gateway bench`` finds nats.js's bench script: the source tree, $FYREHOSE_NODE_MODULES, then npm's
own folders; and the one line that says what to install when none has it.  Fake folders only: no npm registry."""
from __future__ import annotations

import argparse
import json
import os
import stat
from pathlib import Path

import pytest

from fyrehose.errors import CommandFailed
from fyrehose.tools.bench import gateways, npm_packages
from fyrehose.tools.bench.npm_packages import ENV, NATS_BENCH, VERSIONS, candidates, locate

ROOT = Path(__file__).resolve().parents[3]


def node_modules(folder: Path, *packages: str) -> Path:
    """A fake node_modules folder holding ``packages`` (nats with its bench script)."""
    for package in packages:
        (folder / package).mkdir(parents=True)
        (folder / package / "package.json").write_text(json.dumps({"name": package}))
    if "nats" in packages:
        (folder / "nats" / "examples").mkdir()
        (folder / "nats" / "examples" / "bench.js").write_text("// bench\n")
    return folder


class FakeNpm:
    """``npm root`` and ``npm root -g``, recording that they were asked."""

    def __init__(self, local: Path | None, global_: Path | None) -> None:
        self.roots = {False: local, True: global_}
        self.asked: list[bool] = []

    def __call__(self, global_: bool) -> Path | None:
        self.asked.append(global_)
        return self.roots[global_]


def test_the_versions_in_the_message_are_those_tools_node_pins():
    pinned = json.loads((ROOT / "tools" / "node" / "package.json").read_text())["dependencies"]
    assert {package: pinned[package] for package in NATS_BENCH.packages} == {
        package: VERSIONS[package] for package in NATS_BENCH.packages}


def test_in_a_source_tree_the_bootstrapped_folder_comes_first():
    assert npm_packages.SOURCE_TREE == ROOT / "tools" / "node" / "node_modules"


def test_the_lookup_order(tmp_path):
    source, given = tmp_path / "source", tmp_path / "given" / "node_modules"
    local, global_ = tmp_path / "local" / "node_modules", tmp_path / "global" / "node_modules"
    for folder in (source, given, local, global_):
        folder.mkdir(parents=True)
    npm = FakeNpm(local, global_)
    environ = {ENV: str(given)}
    assert [where for where, _ in candidates(source, environ, npm)] == [
        "the source tree", f"${ENV}", "npm root", "npm root -g"]

    node_modules(global_, "nats", "minimist")
    npm.asked.clear()
    assert locate(NATS_BENCH, source, environ, npm) == global_ and npm.asked == [False, True]
    node_modules(local, "nats", "minimist")
    assert locate(NATS_BENCH, source, environ, npm) == local
    node_modules(given, "nats")  # without minimist, which bench.js requires: not this one
    assert locate(NATS_BENCH, source, environ, npm) == local
    node_modules(given, "minimist")
    assert locate(NATS_BENCH, source, environ, npm) == given
    node_modules(source, "nats", "minimist")
    npm.asked.clear()
    assert locate(NATS_BENCH, source, environ, npm) == source
    assert npm.asked == []  # npm is not run when an earlier folder has the script


def test_none_has_it_one_line_says_what_to_install_and_where(tmp_path):
    source = tmp_path / "source"
    with pytest.raises(CommandFailed) as raised:
        locate(NATS_BENCH, source, {}, FakeNpm(None, tmp_path / "global"))
    message = str(raised.value)
    assert "\n" not in message
    # no source tree (a pip install): not named
    assert message == (f"nats.js not found (looked in npm root -g {tmp_path / 'global'}): "
                       f"npm install --prefix DIR nats@2.29.3 'minimist@^1.2.8' and set {ENV}=DIR/node_modules "
                       f"(or, global: npm install -g nats@2.29.3 'minimist@^1.2.8')")
    # $FYREHOSE_NODE_MODULES set to a folder without them: install into that one
    given = tmp_path / "mine" / "node_modules"
    source.mkdir()  # a source tree not bootstrapped
    with pytest.raises(CommandFailed) as raised:
        locate(NATS_BENCH, source, {ENV: str(given)}, FakeNpm(None, None))
    assert str(raised.value) == (f"nats.js not found (looked in the source tree {source}; ${ENV} {given}): "
                                 f"npm install --prefix {tmp_path / 'mine'} nats@2.29.3 'minimist@^1.2.8'")


def test_npm_root_asks_npm_for_its_local_and_global_folders(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    npm = bin_dir / "npm"
    npm.write_text(f'#!/bin/sh\nif [ "$2" = -g ]; then echo {tmp_path}/global; else echo {tmp_path}/local; fi\n')
    npm.chmod(npm.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    assert npm_packages.npm_root(False) == tmp_path / "local"
    assert npm_packages.npm_root(True) == tmp_path / "global"
    npm.write_text("#!/bin/sh\nexit 1\n")
    assert npm_packages.npm_root(False) is None
    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))
    assert npm_packages.npm_root(True) is None  # no npm


def test_the_gateway_bench_stops_before_starting_anything_when_nats_js_is_missing(tmp_path, monkeypatch):
    monkeypatch.setattr(npm_packages, "SOURCE_TREE", tmp_path / "source")
    monkeypatch.setattr(npm_packages, "npm_root", lambda global_: None)
    monkeypatch.setattr(npm_packages, "node", lambda: "/usr/bin/node")
    monkeypatch.delenv(ENV, raising=False)

    def started(*args, **kwargs):
        raise AssertionError("the bench started its processes")

    monkeypatch.setattr(gateways.Processes, "start", started)
    parser = argparse.ArgumentParser()
    gateways.add_arguments(parser)
    with pytest.raises(CommandFailed, match=r"^nats\.js not found: npm install --prefix DIR nats@2\.29\.3"):
        gateways.run(parser.parse_args(["--targets", "nats-server,nats-gateway"]))


def test_nowhere_to_look_still_says_what_to_install(tmp_path):
    with pytest.raises(CommandFailed, match=r"^nats\.js not found: npm install --prefix DIR nats@2\.29\.3 "):
        locate(NATS_BENCH, tmp_path / "source", {}, FakeNpm(None, None))  # no source tree, no npm
