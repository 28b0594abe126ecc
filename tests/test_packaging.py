"""Packaging: a non-editable `pip install .` must carry every package of the tree."""
from __future__ import annotations

import configparser
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _config():
    parser = configparser.ConfigParser()
    parser.read(ROOT / "setup.cfg")
    return parser


def test_every_package_folder_is_listed_in_setup_cfg():
    config = _config()
    mapping = dict(
        line.split("=", 1) for line in config["options"]["package_dir"].strip().splitlines()
    )
    mapping = {name.strip(): folder.strip() for name, folder in mapping.items()}
    listed = set(config["options"]["packages"].split())
    found = set()
    for name, folder in mapping.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            relative = init.parent.relative_to(ROOT / folder)
            if any(part.startswith(".") or part == "__pycache__" for part in relative.parts):
                continue
            dotted = ".".join((name,) + relative.parts) if relative.parts else name
            if any(dotted == other or dotted.startswith(other + ".") for other in mapping if other != name and len(other) > len(name)):
                continue  # belongs to a more specific mapping
            found.add(dotted)
    assert found == listed


def test_every_top_level_folder_of_the_package_is_mapped():
    """client/, backbone/, loadtest/ and tools/ are the package; a folder with an __init__.py under any of them
    is checked above only when its top-level folder is mapped in package_dir."""
    mapping = dict(line.split("=", 1) for line in _config()["options"]["package_dir"].strip().splitlines())
    folders = {folder.strip() for folder in mapping.values()}
    assert folders == {"client", "backbone", "loadtest", "tools"}
    top_level = {init.parent.name for init in ROOT.glob("*/__init__.py")}
    assert top_level <= folders  # a new top-level package folder must be mapped too


def test_the_http_gateways_static_files_are_package_data():
    config = _config()
    assert config["options.package_data"]["fyrehose.gateways.http"].split() == ["static/*"]
    assert any((ROOT / "client" / "gateways" / "http" / "static").iterdir())


def test_console_script_and_import_name():
    config = _config()
    assert "fyrehose = fyrehose.commands.main:main" in config["options.entry_points"]["console_scripts"]
    assert config["metadata"]["name"] == "fyrehose"
