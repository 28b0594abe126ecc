"""Fuzz target: exposition.parse returns samples or raises ExpositionError, never anything else; what it accepts
re-reads the same when written back in the format."""
from __future__ import annotations

import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import instrumented, main  # noqa: E402

with instrumented():
    from fyrehose.runtime.metrics import render
    from fyrehose.tools.watch import exposition

SEEDS = [
    render([("fyrehose_pushes_total", "counter", "PUSH frames sequenced", [({}, 12)]),
            ("fyrehose_dropped_total", "counter", "drops", [({"reason": "ring full"}, 3),
                                                           ({"reason": 'a "quoted"\\ \n reason'}, 1)])]).encode(),
    b'fyrehose_gateway_up{kind="http",} 1 1700000000000\n# TYPE x gauge\nx NaN\ny -Inf\n',
    b"a 1e-3\n\n  b{ c = \"d\" }\t+2.5\n",
]


def _same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


def check(data: bytes) -> None:
    text = data.decode("utf-8", errors="replace")
    try:
        scrape = exposition.parse(text)
    except exposition.ExpositionError:
        return
    metrics = [(name, "untyped", "", [(dict(labels), value) for labels, value in samples])
               for name, samples in scrape.families.items()]
    again = exposition.parse(render(metrics))
    assert again.families.keys() == scrape.families.keys(), "an accepted body does not re-read the same"
    for name, samples in scrape.families.items():
        assert [labels for labels, _ in again.families[name]] == [labels for labels, _ in samples]
        assert all(_same(a, b) for (_, a), (_, b) in zip(again.families[name], samples, strict=True))


if __name__ == "__main__":
    main(check, SEEDS)
