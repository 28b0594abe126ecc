"""Fixtures that start real backbones on loopback and always stop them by PID."""
from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

from fyrehose.runtime.readiness import PORT_RANGE_VARIABLE

from support import BackboneProcess, JournalProcess

# Each test worker (pytest-xdist runs several side by side) hands out loopback ports from a range of its own, below
# the kernel's ephemeral ports, so no two workers' tests ever pick the same port.
_worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
os.environ[PORT_RANGE_VARIABLE] = f"{12000 + 2000 * _worker}-{14000 + 2000 * _worker}"

# Every property test, here and on CI (a busy 2-core machine), is judged by what it finds, never by how fast it ran:
# no per-example deadline and no "too slow" health check, since a core taken away for half a second says nothing
# about the code.  A test's own @settings still sets its example count; these two stay unless it says otherwise.
settings.register_profile("fyrehose", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("fyrehose")

# The gateway fixtures (module_backbone, gateways) for every gateway test module.
pytest_plugins = ["gateway_support"]

# The folders whose test files take longest, slowest first.  pytest-xdist hands each worker whole files
# (--dist loadfile) in collection order: a long file handed out last would leave one worker busy while the others
# idle, so these are collected first (the order within a file does not change).
SLOW_FIRST = ("tests/backbone/pair/", "tests/tools/pipeline/", "tests/tools/bench/", "tests/journal/", "tests/gateways/lumberjack/",
              "tests/cache/", "tests/loadtest/", "tests/drivers/", "tests/backbone/")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        return next((index for index, folder in enumerate(SLOW_FIRST) if item.nodeid.startswith(folder)),
                    len(SLOW_FIRST))

    items.sort(key=rank)


# Every protocol test runs against each backbone mode listed here (--workers values).
BACKBONE_MODES = [0, 2]  # 2: the multi-process backbone (fan-out workers sized by the backbone)


@pytest.fixture
def backbone_factory(tmp_path):
    started: list[BackboneProcess] = []

    def start(workers: int = 0, extra: list[str] | None = None, state_dir=None, port: int = 0) -> BackboneProcess:
        process = BackboneProcess(state_dir or tmp_path / f"state-{len(started)}", workers, extra or [], port=port)
        started.append(process)
        return process.start()

    yield start
    for process in started:
        process.kill()


@pytest.fixture(params=BACKBONE_MODES, ids=lambda workers: f"workers={workers}")
def backbone(request, backbone_factory) -> BackboneProcess:
    return backbone_factory(workers=request.param)


@pytest.fixture
def journals(tmp_path):
    """``journals(backbone, name, *options)`` starts a journal process; every one is killed at the end."""
    started: list[JournalProcess] = []

    def start(backbone, name: str, *extra: str) -> JournalProcess:
        journal = JournalProcess(backbone.address, tmp_path / name, *extra).start()
        started.append(journal)
        return journal

    yield start
    for journal in started:
        journal.kill()
