"""Each fuzz target under tools/fuzz/targets/ runs briefly: hypothesis inputs, the mutation loop, and atheris itself.

The targets' ``check`` functions are the oracles (no crash, no exception but
the parser's own error, split input parses as the whole); long runs are
``python tools/fuzz/targets/fuzz_NAME.py -atheris_runs=N`` (docs/security.md).
"""
from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

FUZZ_DIR = Path(__file__).resolve().parents[3] / "tools" / "fuzz" / "targets"
TARGETS = ["codec", "envelope", "connection", "resp", "redis_auth", "nats", "nats_login", "nats_msg", "marlin",
           "lumberjack", "pair", "users", "exposition", "cookie", "http_authorization", "http_request"]
sys.path.insert(0, str(FUZZ_DIR))

from fyrehose.tools.fuzz.mutation import mutate  # noqa: E402

from harness import run_mutations  # noqa: E402


def target(name: str):
    return importlib.import_module(f"fuzz_{name}")


@pytest.mark.parametrize("name", TARGETS)
def test_target_holds_for_random_and_mutated_inputs_from_hypothesis(name):
    module = target(name)

    @settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
    @given(data=st.one_of(st.binary(max_size=400),
                          st.tuples(st.sampled_from(module.SEEDS), st.randoms(use_true_random=False)).map(
                              lambda pair: mutate(pair[0], pair[1], module.SEEDS))))
    def holds(data):
        module.check(data)

    holds()


@pytest.mark.parametrize("name", TARGETS)
def test_target_holds_for_the_mutation_loop(name):
    module = target(name)
    assert run_mutations(module.check, module.SEEDS, 5000, seed=7) == 5000


@pytest.mark.parametrize("name", TARGETS)
def test_target_accepts_its_own_seeds(name):
    module = target(name)
    for seed in module.SEEDS:
        module.check(seed)


def test_a_target_that_breaks_is_reported_by_the_mutation_loop():
    def check(data: bytes) -> None:
        assert b"\xff\xff" not in data

    with pytest.raises(AssertionError):
        run_mutations(check, [b"\x00" * 8], 5000)


@pytest.mark.parametrize("name", ["codec", "lumberjack"])
def test_target_runs_under_atheris_from_the_command_line(name):
    pytest.importorskip("atheris")
    result = subprocess.run([sys.executable, str(FUZZ_DIR / f"fuzz_{name}.py"), "-atheris_runs=3000"],
                            capture_output=True, timeout=120)
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    assert b"Done 3000 runs" in result.stderr or b"Done 3000 in" in result.stderr


def test_a_target_says_which_build_it_fuzzes():
    """The targets import fyrehose as any program does: the compiled modules where the install built them."""
    from fyrehose.runtime.compiled import describe

    result = subprocess.run([sys.executable, str(FUZZ_DIR / "fuzz_envelope.py"), "-atheris_runs=200", "-use_random=1"],
                            capture_output=True, timeout=120)
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    assert result.stdout.decode().splitlines()[0].endswith(f"fuzzing fyrehose {describe()}")


def test_a_run_with_subjects_that_are_not_utf8_is_checked_as_readers_decide():
    """Found by the mutation loop: a datagram whose envelopes' subjects are not UTF-8 (``a\\xe2``); ``wanted`` hands
    such bytes to the reader's ``decide``, which says no to them, as every reader does."""
    data = (Path(__file__).resolve().parents[2] / "data" / "fuzz_connection_non_utf8_subject.hex").read_text()
    target("connection").check(bytes.fromhex(data.strip()))


def test_a_resp3_map_keyed_by_an_array_is_the_general_loops_to_refuse():
    """Found by hypothesis when hiredis read whole arrays: it raised TypeError (an unhashable map key) for a
    client's ``%1`` after an array; the compiled pass stops there and the general loop refuses it."""
    target("resp").check(b"*2\r\n$7\r\n" + bytes(9) + b"$3\r\n" + bytes(5) + b"%1\r\n")
