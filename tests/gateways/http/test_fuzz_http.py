"""The HTTP gateway's fuzzing: the in-memory connection target (tools/fuzz/targets/fuzz_http.py) and the TCP fuzzer.

Long runs: ``python tools/fuzz/targets/fuzz_http.py -atheris_runs=N`` and
``python -m fyrehose.tools.fuzz http`` (1,000,000 inputs, docs/security.md);
here they run briefly, the full TCP run only with ``-m slow``.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fyrehose.tools.fuzz import http_gateway
from fyrehose.tools.fuzz.mutation import mutate

FUZZ_DIR = Path(__file__).resolve().parents[3] / "tools" / "fuzz" / "targets"
sys.path.insert(0, str(FUZZ_DIR))

import fuzz_http  # noqa: E402

from harness import run_mutations  # noqa: E402


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.one_of(st.binary(max_size=600),
                      st.tuples(st.sampled_from(fuzz_http.SEEDS), st.randoms(use_true_random=False)).map(
                          lambda pair: mutate(pair[0], pair[1], fuzz_http.SEEDS))))
def test_connection_target_holds_for_hypothesis_inputs(data):
    fuzz_http.check(data)


def test_connection_target_holds_for_the_mutation_loop():
    assert run_mutations(fuzz_http.check, fuzz_http.SEEDS, 5000, seed=7) == 5000


def test_connection_target_seeds_reach_every_route():
    """The seeds are valid: each gets its route's answer, so mutations start from deep inside the connection."""
    outputs = [b"".join(fuzz_http.drive(seed).output) for seed in fuzz_http.SEEDS]
    assert outputs[0].startswith(b"HTTP/1.1 200 OK\r\n")  # /healthz
    assert b'{"seq": 1, "receivers": 0}' in outputs[1] and b'{"seq": 1, "receivers": 0}' in outputs[2]
    assert b"id: 1\nevent: fuzz.subject\ndata: routed\n\n" in outputs[3]  # the routed message reached the stream
    assert outputs[4].startswith(b"HTTP/1.1 504 ")  # no cache answers in memory for a.b
    assert b"101 Switching Protocols" in outputs[5] and b"message" in outputs[5]
    assert b"pmessage" in outputs[7]
    assert outputs[9].startswith(b"HTTP/1.1 304 ") and b'etag: "7"\r\nfyrehose-sequence: 7' in outputs[9]
    assert b"HTTP/1.1 200 OK" in outputs[9] and outputs[9].endswith(b"\r\n\r\ncached")
    # with --users: the anonymous user streams fuzz.>, the wrong credentials get 401 (and the upgrade too)
    assert outputs[10].startswith(b"HTTP/1.1 200 OK") and b"event: fuzz.subject\ndata: routed" in outputs[10]
    assert outputs[11].startswith(b"HTTP/1.1 401 ") and outputs[11].count(b"HTTP/1.1 401 ") == 2
    assert outputs[12].startswith(b"HTTP/1.1 401 ")


def test_connection_target_runs_under_atheris():
    pytest.importorskip("atheris")
    result = subprocess.run([sys.executable, str(FUZZ_DIR / "fuzz_http.py"), "-atheris_runs=3000"],
                            capture_output=True, timeout=300)
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    assert b"Done 3000 runs" in result.stderr or b"Done 3000 in" in result.stderr


def test_tcp_fuzzer_small_run():
    result = http_gateway.fuzz_http(inputs=3000, connections=4, seed=3, log=lambda line: None)
    assert result.alive and result.healthy and result.connection_failures == 0, result
    assert result.real_seen == result.real_published == 1, result


@pytest.mark.slow
def test_tcp_fuzzer_a_million_inputs_memory_flat():
    result = http_gateway.fuzz_http(inputs=1_000_000, connections=8, seed=1)
    assert result.passed, result
