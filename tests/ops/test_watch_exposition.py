"""The Prometheus text format as fyrehose top reads it: what the processes write reads back exactly, and a body
that is not the format is refused with the line it broke on (forged bodies: tools/fuzz/targets/fuzz_exposition.py,
run by tests/tools/fuzz/test_fuzz_targets.py)."""
from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fyrehose.runtime.metrics import render
from fyrehose.tools.watch.exposition import ExpositionError, parse


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
    ("_ \x0b", "line 1: expected NAME"),  # a blank to str.split, not to the format: no value at all
    ("a 1\x0b2", "line 1: expected NAME"),
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
    scrape = parse(render([(name, "gauge", "help text", samples) for name, samples in families]))
    written: dict[str, list] = {}
    for name, samples in families:  # a name given twice is one family read back
        written.setdefault(name, []).extend((tuple(sorted(labels.items())), value) for labels, value in samples)
    assert {name for name, samples in written.items() if samples} == set(scrape.families)
    for name, samples in scrape.families.items():
        assert [labels for labels, _ in samples] == [labels for labels, _ in written[name]]
        assert all(a == b or (math.isnan(a) and math.isnan(b))
                   for (_, a), (_, b) in zip(samples, written[name], strict=True))
