"""The kit's alert rules: promtool accepts them, their unit tests pass, every rule says what broke and what to do."""
from __future__ import annotations

import re
import subprocess

from ops_support import RULE_TESTS, RULES, SCRAPE, kit_jobs, rule_expressions


def promtool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["promtool", *args], capture_output=True, text=True, timeout=120)


def test_promtool_accepts_the_rules():
    checked = promtool("check", "rules", str(RULES))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(rule_expressions())} rules found" in checked.stdout


def test_the_rules_unit_tests_pass_under_promtool():
    tested = promtool("test", "rules", str(RULE_TESTS))
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout


def test_every_rule_has_a_unit_test_a_severity_a_summary_and_a_runbook_line():
    text = RULES.read_text()
    tested = set(re.findall(r"alertname: (\w+)", RULE_TESTS.read_text()))
    for name in rule_expressions():
        assert name in tested, f"{name} has no promtool unit test"
        rule = text.split(f"- alert: {name}\n", 1)[1].split("- alert:", 1)[0]
        assert re.search(r"severity: (critical|warning|info)\n", rule), name
        assert re.search(r"summary: \".+\"\n", rule), name
        assert re.search(r"runbook: \".+\"\n", rule), name


def test_the_unit_tests_also_say_when_an_alert_must_not_fire():
    assert RULE_TESTS.read_text().count("exp_alerts: []") >= 8


def test_the_kits_scrape_file_names_the_jobs_the_rules_and_dashboard_expect():
    assert kit_jobs() == ["fyrehose-backbone", "fyrehose-journal", "fyrehose-cache", "fyrehose-gateway"]
    assert "fyrehose-alerts.yml" in SCRAPE.read_text()
