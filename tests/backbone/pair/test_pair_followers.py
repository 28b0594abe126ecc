"""Everything that follows the backbone keeps working across a takeover, with no restart and no option changed:
on the client host of a real pair (tests/backbone/pair/test_pair_namespaces.py has the faults), a journal, the
Redis and HTTP gateways and a load test run through a kill -9 of the primary backbone (sync mode), beside the
measuring publisher and subscriber.  Afterwards the journal holds every confirmed message under its number, the
gateways publish through the new primary, and the load test confirmed and received everything it sent."""
from __future__ import annotations

import json
import sys
import time

import pytest

from fyrehose.journal.reader import FileScan, list_segments
from fyrehose.tools.bench.failover import FailoverSettings, pair_rig, summarize, take_over
from fyrehose.tools.bench.pair_hosts import unavailable
from tests.backbone.pair.test_pair_namespaces import RATE, _Report

pytestmark = pytest.mark.skipif(unavailable() is not None, reason=f"a standby pair in namespaces: {unavailable()}")

FYREHOSE = [sys.executable, "-m", "fyrehose"]


def run_in_client(net, argv: list[str], timeout: float = 30.0) -> str:
    proc = net.start("client", argv)
    proc.wait(timeout)
    return net.log(proc).read_text()


def test_journal_gateways_and_load_test_go_on_through_a_takeover(tmp_path):
    workdir = tmp_path / "pair"
    journal_dir = tmp_path / "journal"
    loadtest_dir = tmp_path / "loadtest"
    settings = FailoverSettings(runs=1, rate=RATE, sync=True, grace=3.0)
    with pair_rig(workdir, True, RATE) as (pair, client):
        net = pair.net
        here = str(net.address("client"))
        service = f"{net.vip.ip}:2323"
        journal = net.start("client", FYREHOSE + ["journal", "--backbone", service, "--dir", str(journal_dir)])
        redis = net.start("client", FYREHOSE + ["gateway", "redis", "--listen", f"{here}:6390", "--backbone", service])
        http = net.start("client", FYREHOSE + ["gateway", "http", "--listen", f"{here}:8090", "--backbone", service])
        for proc in (journal, redis, http):
            net.wait_ready(proc, 30)
        loadtest = net.start("client", FYREHOSE + [
            "loadtest", "--backbone", service, "--duration", "8", "--rate", "200", "--timeout", "5",
            "--out", str(loadtest_dir)])
        client.ask("stream")
        time.sleep(2.0)
        takeover = take_over(pair, _Report(), 0)
        published = run_in_client(net, ["redis-cli", "-h", here, "-p", "6390", "PUBLISH", "news", "after"])
        posted = run_in_client(net, ["curl", "-s", "-X", "POST", "--data", "after",
                                     f"http://{here}:8090/v1/publish/news"])
        record = client.ask(f"finish {settings.grace}", timeout=90)
        assert loadtest.wait(90) == 0, net.log(loadtest).read_text()[-3000:]
        time.sleep(1.0)  # the journal writes what it took at most this late
        for proc in (journal, redis, http):
            assert proc.poll() is None, net.log(proc).read_text()[-2000:]
            net.stop(proc, 10)
    doc = summarize(settings, {}, [takeover], record)
    assert doc["completed"] == 1 and doc["confirmed_lost"] == 0 and doc["wrong_numbers"] == 0
    assert published.strip().removeprefix("(integer) ").isdigit(), published
    assert json.loads(posted)["seq"] > 0, posted
    summary = json.loads((loadtest_dir / "summary.json").read_text())
    assert summary["complete"] and summary["failures"] == 0 and summary["messages_lost_after_recovery"] == 0
    journaled = {}
    segments, _ = list_segments(journal_dir)
    for segment in segments:
        for _, entry in FileScan(segment.path):
            journaled[entry.seq] = entry.data
    confirmed = [(index, seq) for index, _, seq in record["published"] if seq > 0]
    assert all(journaled.get(seq) == b"%012d" % index for index, seq in confirmed)
