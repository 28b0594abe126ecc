"""The deployment kit's files: systemd units that systemd accepts, with command lines fyrehose accepts, and the sysctl file.

``systemd-analyze verify`` loads each unit as systemd would and also insists
that ExecStart's program exists: the units name ``/opt/fyrehose/bin/fyrehose``
(the venv docs/operations.md installs into), so the test verifies copies that
name this checkout's ``fyrehose`` instead, found through ``SYSTEMD_UNIT_PATH``
(the keepalived drop-in beside Debian's keepalived.service).  It prints
warnings (an unknown key, a key in the wrong section) yet exits 0: any output
is a failure.  ``--man=no``: the Documentation= man pages need not be installed.
"""
from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fyrehose.commands.main import build_parser

from support import run_cli

ROOT = Path(__file__).resolve().parents[2]
UNITS = ROOT / "tools" / "systemd"
SYSCTL = ROOT / "tools" / "sysctl" / "90-fyrehose.conf"
INSTALLED = "/opt/fyrehose/bin/fyrehose"
GATEWAYS = ("redis", "nats", "marlin", "lumberjack", "http")
INSTANCES = ["fyrehose-backbone.service", "fyrehose-journal.service", "fyrehose-cache.service",
             *(f"fyrehose-gateway@{kind}.service" for kind in GATEWAYS)]
# What /etc/fyrehose/*.env would say on a host
ENVIRONMENT = {"FYREHOSE_BACKBONE": "10.0.0.100:2323", "FYREHOSE_PAIR": "10.0.0.1:2324",
               "FYREHOSE_PEER": "10.0.0.2:2324", "FYREHOSE_GATEWAY_LISTEN": "0.0.0.0:6379"}


def unit_text(instance: str) -> str:
    return (UNITS / re.sub(r"@[^.]+\.", "@.", instance)).read_text()


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze (Debian's systemd) is not installed")
def test_systemd_accepts_every_unit_and_the_keepalived_drop_in(tmp_path):
    fyrehose = Path(sys.executable).with_name("fyrehose")
    assert fyrehose.exists()
    for source in UNITS.rglob("*"):
        target = tmp_path / source.relative_to(UNITS)
        if source.is_dir():
            target.mkdir()
        else:
            target.write_text(source.read_text().replace(INSTALLED, str(fyrehose)))
    units = [*INSTANCES, "keepalived.service"] if Path("/lib/systemd/system/keepalived.service").exists() else INSTANCES
    done = subprocess.run(["systemd-analyze", "verify", "--man=no", *units], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "SYSTEMD_UNIT_PATH": f"{tmp_path}:"})
    assert (done.returncode, done.stdout + done.stderr) == (0, "")
    assert "fyrehose-backbone.service" in (UNITS / "keepalived.service.d" / "fyrehose.conf").read_text()


def exec_start(instance: str) -> list[str]:
    """ExecStart's arguments after the program, as systemd would expand them with ENVIRONMENT."""
    line = next(line for line in unit_text(instance).splitlines() if line.startswith("ExecStart="))
    words = shlex.split(line.removeprefix("ExecStart="))
    assert words[0] == INSTALLED
    kind = instance.partition("@")[2].partition(".")[0]
    expanded: list[str] = []
    for word in words[1:]:
        if re.fullmatch(r"\$[A-Z_]+", word):  # $VAR: split on whitespace, nothing when unset
            expanded += ENVIRONMENT.get(word[1:], "").split()
        else:
            expanded.append(re.sub(r"\$\{([A-Z_]+)\}", lambda match: ENVIRONMENT[match.group(1)], word)
                            .replace("%i", kind))
    return expanded


def parses(argv: list[str]) -> argparse.Namespace:
    try:
        return build_parser().parse_args(argv)
    except SystemExit as exit:
        raise AssertionError(f"fyrehose {' '.join(argv)} is refused") from exit


@pytest.mark.parametrize("instance", INSTANCES[1:])
def test_each_service_runs_a_command_line_fyrehose_accepts(instance):
    args = parses(exec_start(instance))
    assert "10.0.0.100" in str(args.backbone) and args.command == instance.split("-")[1].partition("@")[0].partition(".")[0]


def test_the_backbone_runs_one_process_of_the_pair_in_its_state_directory():
    argv = exec_start("fyrehose-backbone.service")
    assert argv[:6] == ["backbone", "--listen", "10.0.0.100:2323", "--workers", "0", "--pair"]
    assert argv[argv.index("--state-dir") + 1] == "/var/lib/fyrehose/backbone"
    assert "StateDirectory=fyrehose/backbone" in unit_text("fyrehose-backbone.service")
    if b"--pair" not in run_cli("backbone", "--help").stdout:
        pytest.skip("fyrehose backbone has no --pair/--peer yet: the standby mode lands them")
    parses(argv)


@pytest.mark.parametrize("instance", INSTANCES)
def test_every_service_restarts_runs_as_fyrehose_and_keeps_to_its_cores(instance):
    text = unit_text(instance)
    for setting in ("Restart=always", "User=fyrehose", "LimitNOFILE=65536", "StartLimitIntervalSec=0"):
        assert f"\n{setting}\n" in text, setting
    affinity = "CPUAffinity=1" if "backbone" in instance else "CPUAffinity=0 2-1023"
    assert f"\n{affinity}\n" in text


@pytest.mark.skipif(shutil.which("systemd-sysusers") is None, reason="systemd-sysusers (systemd) is not installed")
def test_the_sysusers_file_makes_the_fyrehose_user(tmp_path):
    (tmp_path / "etc").mkdir()
    done = subprocess.run(["systemd-sysusers", f"--root={tmp_path}", str(UNITS / "fyrehose.sysusers")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert re.search(r"^fyrehose:x:\d+:\d+:fyrehose services:/var/lib/fyrehose:/usr/sbin/nologin$",
                     (tmp_path / "etc" / "passwd").read_text(), re.MULTILINE)


def sysctl_settings() -> dict[str, str]:
    settings = {}
    for line in SYSCTL.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            key, equals, value = line.partition("=")
            assert equals, line
            settings[key.strip()] = " ".join(value.split())
    return settings


def test_every_sysctl_key_exists_on_this_kernel():
    settings = sysctl_settings()
    assert len(settings) == 6
    for key in settings:
        assert Path("/proc/sys", *key.split(".")).exists(), key


def test_the_sysctl_file_says_what_docs_operations_asks_for():
    operations = (ROOT / "docs" / "operations.md").read_text()
    asked = {}
    for line in re.findall(r"^sysctl -w (.+?)(?:\s+#.*)?$", operations, re.MULTILINE):
        for key, value in re.findall(r'([a-z0-9_.]+)=("[^"]*"|\S+)', line):
            asked[key] = value.strip('"')
    assert asked == sysctl_settings()
    assert "tools/sysctl/90-fyrehose.conf" in operations
