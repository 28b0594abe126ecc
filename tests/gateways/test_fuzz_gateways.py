"""Every TCP gateway survives a hostile client's attack classes and keeps serving honest clients, memory flat.

The default run sends a few thousand hostile inputs per gateway; ``-m slow`` sends a million
(the figures in docs/security.md come from ``python -m fyrehose.tools.fuzz gateway all``).
"""
from __future__ import annotations

import pytest

from fyrehose.tools.fuzz.gateway import ATTACKS, KINDS, fuzz_gateway


def _check(result) -> None:
    assert result.alive, f"the {result.kind} gateway died"
    assert result.probes and not result.probes_failed, f"{result.probes_failed} of {result.probes} honest round trips failed"
    assert result.internal_seen == 0, f"{result.internal_seen} internal messages reached a gateway client"
    assert result.flat, (result.rss_middle, result.rss_end)


@pytest.mark.parametrize("kind", KINDS)
def test_gateway_survives_hostile_clients(kind):
    result = fuzz_gateway(kind, inputs=8_000, seed=5, log=lambda _: None)
    _check(result)
    assert set(result.attacks) == set(ATTACKS), result.attacks


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
def test_gateway_memory_is_flat_over_a_million_hostile_inputs(kind):
    result = fuzz_gateway(kind, inputs=1_000_000, seed=1, log=print)
    _check(result)
    assert set(result.attacks) == set(ATTACKS), result.attacks
