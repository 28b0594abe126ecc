"""``fyrehose bench --journal N``: its figures per journal, as a table and as JSON (a short run; no rate is judged)."""
from __future__ import annotations

import json

from support import run_cli


def test_bench_journal_reports_rate_lag_and_loss_per_journal(tmp_path):
    out = tmp_path / "journal.json"
    result = run_cli("bench", "--journal", "2", "--duration", "1", "--rounds", "1", "--rate", "20000",
                     "--catch-up", "20", "--json", str(out), timeout=180)
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    table = result.stdout.decode()
    assert "journaled msgs/s" in table and "permanent loss" in table and "journal-2" in table
    doc = json.loads(out.read_text())
    assert doc["settings"]["journals"] == 2 and doc["settings"]["backbone"] == "fyrehose-single"
    assert [j["journal"] for j in doc["journals"]] == ["journal-1", "journal-2"]
    (step,) = doc["rounds"]
    for journal in step["journals"]:
        assert journal["permanent_loss"] == 0
        assert journal["catch_up_s"] is not None  # it reached the HEAD
        assert journal["written"] >= step["head"]  # everything the backbone sequenced, written


def test_drop_every_adds_a_subscriber_whose_holes_only_the_journal_fills(tmp_path):
    out = tmp_path / "journal.json"
    result = run_cli("bench", "--journal", "1", "--duration", "1", "--rounds", "1", "--rate", "20000",
                     "--drop-every", "5", "--catch-up", "20", "--json", str(out), timeout=180)
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    assert "subscriber dropping one DELIVER datagram in 5 (backbone --recent-bytes 0" in result.stdout.decode()
    doc = json.loads(out.read_text())
    (step,) = doc["rounds"]
    sub = step["subscriber"]
    assert sub == doc["subscriber"]  # one round: it is the worst
    assert sub["holes_filled"] > 0 and sub["requests"] >= sub["holes_filled"]
    assert sub["recovered"] > 0 and sub["missing"] == 0  # every dropped message came back, and only a journal had it
    assert sub["received"] + sub["recovered"] >= step["head"]
    assert step["journals"][0]["forwarded"] >= sub["recovered"]


def test_bench_journal_refuses_a_negative_count():
    result = run_cli("bench", "--journal", "-1")
    assert result.returncode != 0 and len(result.stderr.decode().strip().splitlines()) <= 3
