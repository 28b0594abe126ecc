"""Random and mutated datagrams against a running backbone in both modes (fyrehose.tools.fuzz.backbone).

The default run sends 20,000 per mode; the slow run the full million.  A mode
passes when the backbone never exited, its memory stayed flat and a real
client still publishes and receives every message in order afterwards.
"""
from __future__ import annotations

import pytest
from conftest import BACKBONE_MODES

from fyrehose.tools.fuzz.backbone import fuzz_mode, main


@pytest.mark.parametrize("workers", BACKBONE_MODES, ids=lambda w: f"workers={w}")
def test_twenty_thousand_bad_datagrams_leave_the_backbone_running_flat_and_delivering(workers):
    result = fuzz_mode(workers, 20_000, rate=50_000, sources=8, seed=3, log=lambda *_: None)
    assert result.alive and result.flat and result.delivering, result
    assert result.counters["drop:malformed"] > 10_000  # the input really was bad, and counted
    assert result.counters["pushes"] > 0  # and some of it really was sequenced


def test_command_refuses_bad_options(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--datagrams", "0"])
    assert exit_info.value.code == 2
    assert "--datagrams" in capsys.readouterr().err


@pytest.mark.slow
def test_one_million_datagrams_per_mode(tmp_path):
    assert main(["--datagrams", "1000000", "--modes", ",".join(map(str, BACKBONE_MODES)),
                 "--json", str(tmp_path / "fuzz.json")]) == 0
