"""Every process that reads the backbone protocol survives random, mutated and forged datagrams.

The default run sends a few thousand datagrams per endpoint; ``-m slow`` sends the full million
(the figures in docs/security.md come from ``python -m fyrehose.tools.fuzz.endpoint all``).
"""
from __future__ import annotations

import pytest

from fyrehose.tools.fuzz.endpoint import ENDPOINTS, fuzz_endpoint


def _check(result) -> None:
    assert result.alive, f"{result.endpoint} died"
    assert result.forged_seen == 0, f"{result.endpoint} passed on {result.forged_seen} forged payloads"
    assert result.real_seen == result.real_published, (result.real_seen, result.real_published, result.check)
    assert result.flat, (result.rss_middle, result.rss_end)


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_endpoint_survives_and_lets_nothing_forged_through(endpoint):
    _check(fuzz_endpoint(endpoint, datagrams=10_000, rate=20_000, seed=7, log=lambda _: None))


@pytest.mark.slow
@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_endpoint_survives_a_million_datagrams(endpoint):
    _check(fuzz_endpoint(endpoint, datagrams=1_000_000, rate=20_000, seed=1, log=print))


def test_one_command_names_every_target():
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-m", "fyrehose.tools.fuzz", "nowhere"], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "backbone, sub, journal, cache" in result.stderr
