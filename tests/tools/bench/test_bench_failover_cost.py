"""The standby's cost as ``fyrehose bench failover`` measures it: the paced step against a real backbone, and the
scheduler's counts it reads (every thread's CPU time in nanoseconds, the loop's wakes)."""
from __future__ import annotations

import os
import threading
import time

from fyrehose.tools.bench.failover import cpu_seconds, loop_wakes
from fyrehose.tools.bench.failover_client import PACED_BATCH, paced


def test_the_paced_step_offers_whole_batches_at_its_rate_and_all_are_confirmed(backbone_factory):
    backbone = backbone_factory()
    answer = paced(f"127.0.0.1:{backbone.port}", 0.5, 20 * PACED_BATCH)  # 20 batches a second: about 10
    assert answer["messages"] % PACED_BATCH == 0
    assert PACED_BATCH <= answer["messages"] <= 11 * PACED_BATCH  # never ahead of the rate
    assert answer["rate"] > 0


def test_cpu_seconds_counts_the_other_threads_and_loop_wakes_the_main_threads_sleeps():
    pid = os.getpid()
    go, spent, stop = threading.Event(), threading.Event(), threading.Event()

    def spin() -> None:  # 50 ms of its own CPU after `go`, then alive but asleep until `stop`
        go.wait(30)
        began = time.thread_time()
        while time.thread_time() - began < 0.05:
            pass
        spent.set()
        stop.wait(30)

    worker = threading.Thread(target=spin)
    worker.start()
    try:
        before, wakes = cpu_seconds(pid), loop_wakes(pid)
        go.set()
        assert spent.wait(30)  # the main thread sleeps meanwhile: one wake at least
        during, woken = cpu_seconds(pid), loop_wakes(pid)
    finally:
        stop.set()
        worker.join()
    assert during - before >= 0.05
    assert woken > wakes
