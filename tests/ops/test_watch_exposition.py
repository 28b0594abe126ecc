"""The Prometheus text format as fyrehose top reads it: what the processes write reads back exactly, and a body
that is not the format is refused with the line it broke on (forged bodies: the fuzz target, run here)."""
from __future__ import annotations

import importlib
import math
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fyrehose.runtime.metrics import render
from fyrehose.tools.fuzz.mutation import mutate
from fyrehose.tools.watch.exposition import ExpositionError, parse

FUZZ_DIR = Path(__file__).resolve().parents[2] / "tools" / "fuzz" / "targets"
sys.path.insert(0, str(FUZZ_DIR))
fuzz_exposition = importlib.import_module("fuzz_exposition")
from harness import run_mutations  # noqa: E402


def test_samples_labels_and_special_values_are_read():
    scrape = parse('# HELP fyrehose_dropped_total drops\n# TYPE fyrehose_dropped_total counter\n'
                   'fyrehose_dropped_total{reason="ring full"} 3\n'
                   'fyrehose_dropped_total{reason="malformed",} 4 1700000000000\n'
                   'x{a="q\\"uote\\\\ and \\n newline"} -Inf\n'
                   '  y\t+1.5e3  \n\nz NaN\n')
    assert scrape.total("fyrehose_dropped_total") == 7
    assert scrape.total("fyrehose_dropped_total", {"reason": "malformed"}) == 4
    assert scrape.by_label("fyrehose_dropped_total", "reason") == {"ring full": 3, "malformed": 4}
    assert scrape.families["x"] == [((("a", 'q"uote\\ and \n newline'),), -math.inf)]
    assert scrape.total("y") == 1500 and math.isnan(scrape.total("z"))
    assert scrape.total("absent") is None and not scrape.has("absent")


@pytest.mark.parametrize("body, where", [
    ("fyrehose_pushes_total", "line 1: expected NAME"),
    ("ok 1\nfyrehose_pushes_total 1 2 3", "line 2: expected NAME"),
    ("a{b=\"c\"}1", "line 1: expected NAME"),
    ("a 1_000", "line 1: expected NAME"),
    ("a infinity", "line 1: expected NAME"),
    ("a 1 1.5", "line 1: expected NAME"),
    ("{b=\"c\"} 1", "a metric name was expected"),
    ("a{b=c} 1", "label b needs"),
    ("a{b=\"c} 1", "is not closed"),
    ("a{b=\"\\t\"} 1", "unknown escape"),
    ("a{b=\"1\",b=\"2\"} 1", "given twice"),
    ("a{b=\"1\" c=\"2\"} 1", "',' or '}' expected"),
    ("a{1=\"2\"} 1", "a label name was expected"),
    ("<html><body>502 Bad Gateway</body></html>", "a metric name was expected"),
])
def test_what_is_not_the_format_is_refused_with_its_line(body, where):
    with pytest.raises(ExpositionError, match=where.replace("{", "\\{").replace("}", "\\}")):
        parse(body)


names = st.from_regex(r"[a-zA-Z_:][a-zA-Z0-9_:]{0,20}", fullmatch=True)
label_names = st.from_regex(r"[a-zA-Z_][a-zA-Z0-9_]{0,10}", fullmatch=True)
values = st.one_of(st.integers(-2**53, 2**53).map(float), st.floats(allow_nan=True, allow_infinity=True))


@given(st.lists(st.tuples(names, st.lists(st.tuples(st.dictionaries(label_names, st.text(max_size=20), max_size=3),
                                                    values), max_size=4)), max_size=6))
def test_what_the_processes_render_reads_back_exactly(families):
    metrics = [(name, "gauge", "help text", samples) for name, samples in families]
    scrape = parse(render(metrics))
    for name, samples in families:
        read = [value for labels, value in scrape.families.get(name, [])]
        expected = [value for _, samples_of in families if _ == name for _, value in samples_of]
        assert len(read) == len(expected)
        assert all(a == b or (math.isnan(a) and math.isnan(b)) for a, b in zip(read, expected, strict=True))
        for labels, _ in samples:
            assert tuple(sorted(labels.items())) in [found for found, _ in scrape.families[name]]


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.one_of(st.binary(max_size=300),
                      st.tuples(st.sampled_from(fuzz_exposition.SEEDS), st.randoms(use_true_random=False)).map(
                          lambda pair: mutate(pair[0], pair[1], fuzz_exposition.SEEDS))))
def test_forged_bodies_are_read_or_refused_never_crash(data):
    fuzz_exposition.check(data)


def test_the_fuzz_target_holds_for_its_mutation_loop_and_its_seeds():
    for seed in fuzz_exposition.SEEDS:
        parse(seed.decode())
    assert run_mutations(fuzz_exposition.check, fuzz_exposition.SEEDS, 5000, seed=11) == 5000
