"""The package's folders are its layers, and a layer imports only the layers below it (docs/architecture.md).

Pure layers (the protocol, the subject layer, the backbone's core, and the pure
modules of the services) touch no socket, thread, process, timer or gevent:
bytes and time in, actions out.  This reads every module's imports (all of
them, including those inside functions) and names each one that breaks the rule.
"""
from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = {"fyrehose": ROOT / "client", "fyrehose.backbone": ROOT / "backbone",
           "fyrehose.loadtest": ROOT / "loadtest", "fyrehose.tools": ROOT / "tools"}

# Layers, lowest first: a module may import its own layer and those listed for it.
PURE, NET, RUNTIME, DRIVERS, SERVICES, TOOLS, COMMANDS = "pure", "net", "runtime", "drivers", "services", "tools", \
    "commands"
MAY_IMPORT = {
    PURE: {PURE},
    NET: {PURE, NET},
    RUNTIME: {PURE, NET, RUNTIME},
    DRIVERS: {PURE, NET, RUNTIME, DRIVERS},
    SERVICES: {PURE, NET, RUNTIME, DRIVERS, SERVICES},
    TOOLS: {PURE, NET, RUNTIME, DRIVERS, SERVICES, TOOLS},
    COMMANDS: {PURE, NET, RUNTIME, DRIVERS, SERVICES, TOOLS, COMMANDS},
}
# The backbone's rules (its drivers are backbone.single, backbone.host, backbone.multiprocess), and the standby
# pair's (backbone.pair, driven by backbone.single.pair_member).
BACKBONE_CORE = {"core", "clients", "confirms", "cookies", "intake", "pushes", "ratelimit", "recent_log", "redelivery",
                 "sequence_counter", "pair"}
# Pure modules inside the service folders: the state machines and codecs their drivers run.  (The gateways' are
# not listed: their folder is pure but for its drivers, GATEWAY_DRIVERS.)
PURE_SERVICE_MODULES = {
    "fyrehose.cache.core", "fyrehose.cache.merge",
    "fyrehose.journal.segment", "fyrehose.journal.lag", "fyrehose.journal.summary",
    "fyrehose.loadtest.measuring_subscriber", "fyrehose.loadtest.account", "fyrehose.loadtest.stamp",
    "fyrehose.loadtest.tally", "fyrehose.loadtest.rates",
    "fyrehose.tools.bench.search", "fyrehose.tools.deploy.keepalived", "fyrehose.backbone.multiprocess.confirm_table",
    "fyrehose.tools.watch.exposition", "fyrehose.tools.watch.endpoints", "fyrehose.tools.watch.screen",
}
# The gateways: every module under fyrehose.gateways is pure (parsers, connections, access, outboxes, whatever
# protocol folder is added), but for their I/O, which is in this one folder (a service's).
GATEWAYS, GATEWAY_DRIVERS = "fyrehose.gateways", "fyrehose.gateways.drivers"
# What a pure module may not import: I/O, concurrency, processes, the wall clock and its sleep, logging, imports
# by name at run time.
IMPURE_STDLIB = {"socket", "select", "selectors", "threading", "_thread", "multiprocessing", "subprocess", "asyncio",
                 "signal", "ctypes", "queue", "concurrent", "socketserver", "http", "gevent", "psutil", "time",
                 "fcntl", "termios", "logging", "importlib", "shutil", "tempfile", "io"}
# ...except these names, which convert addresses and open nothing.
SOCKET_CONVERSIONS = {"inet_aton", "inet_ntoa", "inet_pton", "inet_ntop"}
# Modules a pure module may import only for the names listed: what it truly needs (randomness, the byte order).
LIMITED_STDLIB = {"os": {"urandom"}, "sys": {"byteorder"}}
# The services: a service's modules may import each other, not another service's (each is its own process).
SERVICE_ROOTS = ("fyrehose.backbone", "fyrehose.journal", "fyrehose.cache", "fyrehose.gateways", "fyrehose.loadtest")
# Imports between services that are allowed, each for its reason (none today).
SERVICE_EXCEPTIONS: set[tuple[str, str]] = set()
# The second name of every module of the package (fyrehose.NAME...): a folder not listed has no layer.
FOLDER_LAYERS = {"protocol": PURE, "subjects": PURE, "net": NET, "runtime": RUNTIME, "drivers": DRIVERS,
                 "journal": SERVICES, "cache": SERVICES, "gateways": SERVICES, "loadtest": SERVICES,
                 "tools": TOOLS, "commands": COMMANDS}


class UnknownFolder(LookupError):
    """A module in a folder no layer is given for: the drawing in docs/architecture.md must say where it stands."""


def _module_files() -> dict[str, Path]:
    modules: dict[str, Path] = {}
    for package, folder in FOLDERS.items():
        for path in folder.rglob("*.py"):
            relative = path.relative_to(folder)
            if relative.parts[0] in ("node", "fuzz") and package == "fyrehose.tools" and "targets" in relative.parts:
                continue  # fuzz targets are scripts, not modules of the package
            parts = list(relative.with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join([package, *parts])] = path
    return modules


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def layer_of(module: str) -> str:
    if module.endswith(".__main__"):
        return COMMANDS  # ``python -m``: an entry point, like the command line
    if module in PURE_SERVICE_MODULES or module == "fyrehose.errors":
        return PURE
    parts = module.split(".")
    if parts[:2] == ["fyrehose", "backbone"]:
        if len(parts) == 2 or parts[2] in BACKBONE_CORE:
            return PURE
        return SERVICES
    if _within(module, GATEWAYS):
        return SERVICES if _within(module, GATEWAY_DRIVERS) else PURE
    if len(parts) == 1:
        return COMMANDS  # the package root re-exports the API
    try:
        return FOLDER_LAYERS[parts[1]]
    except KeyError:
        raise UnknownFolder(f"{module}: no layer for the folder {parts[1]!r} (tests/test_layers.py FOLDER_LAYERS)") \
            from None


def _imports(path: Path) -> list[tuple[int, str, list[str]]]:
    """(line, module, names) of every import in the file, wherever it stands."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name, []) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.append((node.lineno, node.module, [alias.name for alias in node.names]))
    return found


def _attributes(path: Path, name: str) -> set[str]:
    """Every ``name.X`` the file reads (what a module does with ``import os``)."""
    return {node.attr for node in ast.walk(ast.parse(path.read_text(), str(path)))
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == name}


def public_names(modules: dict[str, Path]) -> dict[str, str]:
    """Each name the package root re-exports -> the module it comes from (``from fyrehose import Client``)."""
    return {name: imported for _, imported, names in _imports(modules["fyrehose"]) for name in names}


def _target(module: str, names: list[str], known: set[str], public: dict[str, str]) -> list[str]:
    """The fyrehose modules an import reaches: ``from fyrehose.x import y`` is module ``fyrehose.x.y`` when it is one,
    and ``from fyrehose import Client`` is the module ``Client`` comes from."""
    if module == "fyrehose":
        return [public.get(name, f"fyrehose.{name}") for name in names] or [module]
    submodules = [f"{module}.{name}" for name in names if f"{module}.{name}" in known]
    return submodules or [module]


def _service(module: str) -> str:
    return next(root for root in SERVICE_ROOTS if module == root or module.startswith(root + "."))


def violations() -> list[str]:
    modules = _module_files()
    known = set(modules)
    public = public_names(modules) if "fyrehose" in modules else {}
    found = []
    for module, path in sorted(modules.items()):
        where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
        try:
            layer = layer_of(module)
        except UnknownFolder as exc:
            found.append(f"{where}: {exc}")
            continue
        for line, imported, names in _imports(path):
            top = imported.partition(".")[0]
            if top == "fyrehose":
                for target in _target(imported, names, known, public):
                    if target == "fyrehose" and layer == COMMANDS:
                        continue
                    try:
                        target_layer = layer_of(target)
                    except UnknownFolder:
                        continue  # reported where that module stands
                    if target_layer not in MAY_IMPORT[layer] or (layer != COMMANDS and target == "fyrehose"):
                        found.append(f"{where}:{line}: {layer} module {module} imports {target} ({target_layer})")
                    elif (layer == SERVICES == target_layer and _service(module) != _service(target)
                          and (module, target) not in SERVICE_EXCEPTIONS):
                        found.append(f"{where}:{line}: service module {module} imports {target} of another service")
            elif layer == PURE and top in IMPURE_STDLIB:
                if top == "socket" and names and set(names) <= SOCKET_CONVERSIONS:
                    continue
                found.append(f"{where}:{line}: pure module {module} imports {imported}")
            elif layer == PURE and top in LIMITED_STDLIB:
                used = set(names) if names else _attributes(path, top)
                if not used <= LIMITED_STDLIB[top]:
                    found.append(f"{where}:{line}: pure module {module} uses {top}."
                                 f"{', '.join(sorted(used - LIMITED_STDLIB[top]))} (it may use only "
                                 f"{', '.join(sorted(LIMITED_STDLIB[top]))})")
    return found


def test_every_module_has_a_layer_and_the_package_root_is_small():
    modules = _module_files()
    assert len(modules) > 150
    root_modules = {module for module, path in modules.items() if path.parent == FOLDERS["fyrehose"]
                    and path.name != "__init__.py"}
    # Everything else lives in a layer's folder.
    assert root_modules <= {"fyrehose.errors", "fyrehose.__main__"}, sorted(root_modules)


def test_layers_import_only_downwards():
    broken = violations()
    assert not broken, "\n".join(broken)


@pytest.mark.parametrize("module, layer", [
    ("fyrehose.protocol.codec", PURE), ("fyrehose.backbone.core", PURE), ("fyrehose.backbone.multiprocess.rings",
                                                                            SERVICES),
    ("fyrehose.drivers.client", DRIVERS), ("fyrehose.commands.main", COMMANDS), ("fyrehose.cache.core", PURE),
    ("fyrehose.gateways", PURE), ("fyrehose.gateways.outbox", PURE), ("fyrehose.gateways.access.users", PURE),
    ("fyrehose.gateways.http.websocket", PURE), ("fyrehose.gateways.drivers", SERVICES),
    ("fyrehose.gateways.drivers.tcp", SERVICES), ("fyrehose.gateways.drivers.http.stream", SERVICES),
])
def test_layer_of_names_the_folder(module, layer):
    assert layer_of(module) == layer


def test_the_check_catches_a_pure_module_that_opens_a_socket(tmp_path, monkeypatch):
    """The rule is not vacuous: a forged pure module importing socket (and a driver) is reported."""
    folder = tmp_path / "client"
    (folder / "protocol").mkdir(parents=True)
    (folder / "protocol" / "leaky.py").write_text("import socket\nfrom fyrehose.drivers.client import Client\n"
                                                  "from socket import inet_aton\n")
    monkeypatch.setitem(FOLDERS, "fyrehose", folder)
    monkeypatch.setitem(FOLDERS, "fyrehose.backbone", tmp_path / "none")
    monkeypatch.setitem(FOLDERS, "fyrehose.loadtest", tmp_path / "none")
    monkeypatch.setitem(FOLDERS, "fyrehose.tools", tmp_path / "none")
    broken = violations()
    assert len(broken) == 2
    assert "imports socket" in broken[0]
    assert "imports fyrehose.drivers.client (drivers)" in broken[1]


def planted(tmp_path, monkeypatch, files: dict[str, str]) -> list[str]:
    """The check run over the real package plus ``files`` (paths under client/ -> source)."""
    folder = tmp_path / "client"
    for relative, source in files.items():
        path = folder / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)
    real = _module_files()
    extra = {f"fyrehose.{relative[:-3].replace('/', '.')}": folder / relative for relative in files}
    monkeypatch.setattr(sys.modules[__name__], "_module_files", lambda: real | extra)
    return [line for line in violations() if str(folder) in line]


@pytest.mark.parametrize("source, complaint", [
    ("from fyrehose import Client\n", "imports fyrehose.drivers.client (drivers)"),
    ("import fyrehose\n", "imports fyrehose (commands)"),
    ("import logging\n", "imports logging"),
    ("import importlib\n", "imports importlib"),
    ("import time\n", "imports time"),
    ("import os\nos.getpid()\n", "uses os.getpid"),
    ("from os import listdir\n", "uses os.listdir"),
])
def test_a_planted_pure_module_that_breaks_the_rule_is_reported(tmp_path, monkeypatch, source, complaint):
    broken = planted(tmp_path, monkeypatch, {"subjects/planted.py": source})
    assert len(broken) == 1 and complaint in broken[0], broken


def test_what_a_pure_module_truly_needs_of_os_and_sys_passes(tmp_path, monkeypatch):
    source = "import os\nimport sys\nTOKEN = os.urandom(8)\nLITTLE = sys.byteorder == 'little'\n"
    assert planted(tmp_path, monkeypatch, {"protocol/planted.py": source}) == []


def test_a_module_in_a_folder_with_no_layer_is_reported(tmp_path, monkeypatch):
    broken = planted(tmp_path, monkeypatch, {"newfolder/thing.py": "import socket\n"})
    assert len(broken) == 1 and "no layer for the folder 'newfolder'" in broken[0]


def test_a_gateway_module_outside_the_drivers_folder_is_pure_whatever_its_name(tmp_path, monkeypatch):
    broken = planted(tmp_path, monkeypatch, {"gateways/newproto/connection.py": "import socket\n",
                                             "gateways/newproto/server.py": "import gevent\n",
                                             "gateways/helper.py": "from fyrehose.drivers.link import BackboneLink\n",
                                             "gateways/newproto/uses_a_driver.py":
                                                 "from fyrehose.gateways.drivers.tcp import TcpClient\n"})
    assert len(broken) == 4 and all("pure module" in line for line in broken), broken
    assert "imports fyrehose.gateways.drivers.tcp (services)" in broken[-1]


def test_the_gateways_drivers_do_io_and_use_each_other_and_the_pure_gateway_modules(tmp_path, monkeypatch):
    source = ("import socket\nimport logging\nimport gevent\nfrom fyrehose.drivers.link import BackboneLink\n"
              "from fyrehose.gateways.drivers.tcp import TcpClient\nfrom fyrehose.gateways.outbox import Outbox\n"
              "from fyrehose.gateways.redis.connection import RedisConnection\n")
    assert planted(tmp_path, monkeypatch, {"gateways/drivers/newproto/driver.py": source}) == []


def test_a_service_importing_another_service_is_reported(tmp_path, monkeypatch):
    broken = planted(tmp_path, monkeypatch, {"cache/planted.py": "from fyrehose.journal.store import JournalStore\n"
                                                                 "from fyrehose.cache.service import main\n"})
    assert len(broken) == 1 and "imports fyrehose.journal.store of another service" in broken[0], broken
