"""The package's folders are its layers, and a layer imports only the layers below it (docs/architecture.md).

Pure layers (the protocol, the subject layer, the backbone's core, and the pure
modules of the services) touch no socket, thread, process, timer or gevent:
bytes and time in, actions out.  This reads every module's imports (all of
them, including those inside functions) and names each one that breaks the rule.
"""
from __future__ import annotations

import ast
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
BACKBONE_CORE = {"core", "clients", "confirms", "intake", "pushes", "ratelimit", "recent_log", "redelivery",
                 "sequence_counter", "pair"}
# Pure modules inside the service folders: the state machines and codecs their drivers run.
PURE_SERVICE_MODULES = {
    "fyrehose.cache.core", "fyrehose.cache.merge",
    "fyrehose.journal.segment", "fyrehose.journal.lag", "fyrehose.journal.summary",
    "fyrehose.gateways.incremental", "fyrehose.gateways.channels", "fyrehose.gateways.echo",
    "fyrehose.gateways.redis.protocol", "fyrehose.gateways.nats.protocol", "fyrehose.gateways.nats.pub_scan",
    "fyrehose.gateways.marlin.protocol",
    "fyrehose.gateways.lumberjack.protocol", "fyrehose.gateways.lumberjack.window",
    "fyrehose.gateways.lumberjack.events", "fyrehose.gateways.http.sse",
    "fyrehose.gateways.outbox", "fyrehose.gateways.requests", "fyrehose.gateways.liveness", "fyrehose.gateways.payloads",
    "fyrehose.gateways.redis.hiredis_parser", "fyrehose.gateways.redis.connection", "fyrehose.gateways.nats.connection",
    "fyrehose.gateways.marlin.connection", "fyrehose.gateways.http.connection", "fyrehose.gateways.http.websocket",
    "fyrehose.gateways.http.resp_values", "fyrehose.gateways.http.settings",
    "fyrehose.loadtest.measuring_subscriber", "fyrehose.loadtest.account", "fyrehose.loadtest.stamp",
    "fyrehose.loadtest.tally", "fyrehose.loadtest.rates",
    "fyrehose.tools.bench.search", "fyrehose.tools.deploy.keepalived",
    "fyrehose.tools.watch.exposition", "fyrehose.tools.watch.endpoints", "fyrehose.tools.watch.screen",
}
# What a pure module may not import: I/O, concurrency, processes, the wall clock's sleep.
IMPURE_STDLIB = {"socket", "select", "selectors", "threading", "_thread", "multiprocessing", "subprocess", "asyncio",
                 "signal", "ctypes", "queue", "concurrent", "socketserver", "http", "gevent", "psutil", "time",
                 "fcntl", "termios"}
# ...except these names, which convert addresses and open nothing.
SOCKET_CONVERSIONS = {"inet_aton", "inet_ntoa", "inet_pton", "inet_ntop"}


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
    second = parts[1] if len(parts) > 1 else ""
    return {"protocol": PURE, "subjects": PURE, "net": NET, "runtime": RUNTIME, "drivers": DRIVERS,
            "journal": SERVICES, "cache": SERVICES, "gateways": SERVICES, "loadtest": SERVICES,
            "tools": TOOLS, "commands": COMMANDS}.get(second, COMMANDS)  # the package root re-exports the API


def _imports(path: Path) -> list[tuple[int, str, list[str]]]:
    """(line, module, names) of every import in the file, wherever it stands."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name, []) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.append((node.lineno, node.module, [alias.name for alias in node.names]))
    return found


def _target(module: str, names: list[str], known: set[str]) -> list[str]:
    """The fyrehose modules an import reaches: ``from fyrehose.x import y`` is module ``fyrehose.x.y`` when it is one."""
    submodules = [f"{module}.{name}" for name in names if f"{module}.{name}" in known]
    return submodules or [module]


def violations() -> list[str]:
    modules = _module_files()
    known = set(modules)
    found = []
    for module, path in sorted(modules.items()):
        layer = layer_of(module)
        where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
        for line, imported, names in _imports(path):
            top = imported.partition(".")[0]
            if top == "fyrehose":
                for target in _target(imported, names, known):
                    if target == "fyrehose":
                        continue  # `from fyrehose import X` of the package root is caught as X's own module above
                    if layer_of(target) not in MAY_IMPORT[layer]:
                        found.append(f"{where}:{line}: {layer} module {module} imports {target} "
                                     f"({layer_of(target)})")
            elif layer == PURE and top in IMPURE_STDLIB:
                if top == "socket" and names and set(names) <= SOCKET_CONVERSIONS:
                    continue
                found.append(f"{where}:{line}: pure module {module} imports {imported}")
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
