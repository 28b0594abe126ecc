"""``fyrehose keepalived``: the configuration keepalived accepts, the scripts it runs, and bad arguments.

The health check and the notify scripts are run here directly, against a
stand-in backbone (tests/pair/standin_backbone.py) or a plain ``sleep``: the
same files keepalived runs.  keepalived's own verdict on the configuration
(``--config-test``) needs the interface to exist, so it runs inside the two
backbone hosts of a :class:`PairHosts`.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from ipaddress import IPv4Address, IPv4Interface
from pathlib import Path, PurePosixPath

import pytest

from fyrehose.errors import CommandFailed, InputError
from fyrehose.runtime.process import ChildProcess
from fyrehose.tools.bench import pair_hosts
from fyrehose.tools.bench.pair_hosts import PairHosts
from fyrehose.tools.deploy.files import insecure, write_scripts
from fyrehose.tools.deploy.keepalived import CHECK, DEMOTE, PROMOTE, KeepalivedHost, render_config

from support import EVENT_WITHIN, run_cli, wait_until

STANDIN = Path(__file__).with_name("standin_backbone.py")
VIP, SRC, PEER = IPv4Interface("10.77.0.100/24"), IPv4Address("10.77.0.1"), IPv4Address("10.77.0.2")


def member(tmp_path: Path, **changes: object) -> KeepalivedHost:
    settings: dict = {"vip": VIP, "interface": "eth0", "src": SRC, "peer": PEER, "priority": 150,
                      "state_dir": PurePosixPath(tmp_path / "state"), "scripts_dir": PurePosixPath(tmp_path / "scripts")}
    return KeepalivedHost(**{**settings, **changes})


def test_the_configuration_has_one_backup_instance_unicast_with_the_check_and_the_notify_scripts(tmp_path):
    text = render_config(member(tmp_path))
    scripts = tmp_path / "scripts"
    for line in ["script_user root", "enable_script_security", "vrrp_rt_priority 50", f"script {scripts}/check", "interval 1",
                 "fall 1", "rise 2", "state BACKUP", "nopreempt", "interface eth0", "virtual_router_id 51",
                 "priority 150", "version 3", "advert_int 0.1", f"unicast_src_ip {SRC}", f"{PEER}", f"{VIP}",
                 f"notify_master {scripts}/promote", f"notify_backup {scripts}/demote",
                 f"notify_fault {scripts}/demote", f"notify_stop {scripts}/demote"]:
        assert f"\n    {line}\n" in text or f"\n        {line}\n" in text, line
    assert text.count("vrrp_instance ") == 1 and "mcast" not in text and "authentication" not in text


def test_the_two_hosts_differ_only_in_their_own_address_the_peer_and_the_priority(tmp_path):
    first = render_config(member(tmp_path)).splitlines()
    second = render_config(member(tmp_path, src=PEER, peer=SRC, priority=100)).splitlines()
    differing = [(one.strip(), two.strip()) for one, two in zip(first, second) if one != two]
    assert differing == [("priority 150", "priority 100"), (f"unicast_src_ip {SRC}", f"unicast_src_ip {PEER}"),
                         (str(PEER), str(SRC))]


def test_a_password_means_vrrp_version_2_and_whole_seconds(tmp_path):
    text = render_config(member(tmp_path, auth_pass="s3cret", advert_int=1.0))
    assert "version 2" in text and "advert_int 1\n" in text and "auth_pass s3cret" in text


@pytest.mark.parametrize("changes, complaint", [
    ({"interface": "eth 0"}, "--interface"),
    ({"interface": "a-very-long-interface"}, "--interface"),
    ({"peer": SRC}, "--peer"),
    ({"vip": IPv4Interface(f"{SRC}/24")}, "--vip"),
    ({"priority": 255}, "--priority"),
    ({"router_id": 256}, "--router-id"),
    ({"state_dir": PurePosixPath("relative/state")}, "--state-dir"),
    ({"scripts_dir": PurePosixPath("/etc/keepalived/my scripts")}, "--scripts-dir"),
    ({"advert_int": 0.005}, "--advert-int"),
    ({"advert_int": 41.0}, "--advert-int"),
    ({"auth_pass": "s3cret"}, "--advert-int"),  # the default 0.1 s is VRRPv3's, which has no authentication
    ({"auth_pass": "too-long-a-password", "advert_int": 1.0}, "--auth-pass"),
    ({"auth_pass": "no#", "advert_int": 1.0}, "--auth-pass"),
])
def test_settings_keepalived_would_refuse_are_refused_naming_the_option(tmp_path, changes, complaint):
    with pytest.raises(InputError, match=complaint):
        member(tmp_path, **changes)


def cli(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess:
    return run_cli("keepalived", "--vip", str(VIP), "--interface", "eth0", "--src", str(SRC), "--peer", str(PEER),
                   "--priority", "150", "--state-dir", str(tmp_path / "state"),
                   "--scripts-dir", str(tmp_path / "scripts"), *extra)


def test_the_command_prints_the_configuration_and_writes_root_only_scripts(tmp_path):
    done = cli(tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode() == render_config(member(tmp_path))
    for name in (CHECK, PROMOTE, DEMOTE):
        path = tmp_path / "scripts" / name
        assert path.stat().st_mode & 0o7777 == 0o755 and path.stat().st_uid == os.geteuid()
        assert subprocess.run(["sh", "-n", str(path)], capture_output=True, timeout=10).returncode == 0


@pytest.mark.parametrize("extra", [
    ["--vip", "10.77.0.100"],
    ["--vip", "10.77.0.300/24"],
    ["--vip", "fd00::100/64"],
    ["--src", "host-a"],
    ["--priority", "0"],
    ["--priority", "300"],
    ["--router-id", "999"],
    ["--advert-int", "soon"],
    ["--advert-int", "2.5", "--auth-pass", "s3cret"],
    ["--interface", "eth0:1"],
])
def test_bad_arguments_give_one_line_and_nonzero_exit(tmp_path, extra):
    done = cli(tmp_path, *extra)
    lines = done.stderr.decode().strip().splitlines()
    assert done.returncode != 0 and len(lines) == 1 and "error" in lines[0], lines
    assert not done.stdout


def test_scripts_under_a_directory_others_may_write_are_refused_as_keepalived_would(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # not sticky, unlike /tmp
    with pytest.raises(CommandFailed, match="writable by users other than root"):
        write_scripts(member(tmp_path, scripts_dir=PurePosixPath(shared / "scripts")))
    shared.chmod(0o1777)
    assert insecure(write_scripts(member(tmp_path, scripts_dir=PurePosixPath(shared / "scripts")))[0]) is None
    os.chown(shared / "scripts", 65534, 65534)
    assert "owned by uid 65534" in str(insecure(shared / "scripts" / CHECK))


@pytest.fixture
def scripts(tmp_path) -> dict[str, Path]:
    (tmp_path / "state").mkdir()
    return {path.name: path for path in write_scripts(member(tmp_path))}


def run_script(path: Path) -> int:
    """The script's exit status (it says nothing on stderr)."""
    done = subprocess.run(["/bin/sh", str(path)], capture_output=True, timeout=10)
    assert not done.stderr, done.stderr
    return done.returncode


@pytest.fixture
def looks(tmp_path, monkeypatch) -> Path:
    """A file that gets a line per pause between two looks of the check: a ``sleep`` first on PATH that says so."""
    record, bin_dir = tmp_path / "sleeps", tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sleep").write_text(f'#!/bin/sh\necho "$1" >> {record}\nexec /bin/sleep "$@"\n')
    (bin_dir / "sleep").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    return record


def pauses(record: Path) -> list[str]:
    return record.read_text().split() if record.exists() else []


@pytest.fixture
def sleeper(tmp_path):
    with ChildProcess(["sleep", "60"], tmp_path / "sleep.log") as child:
        yield child


def state_files(tmp_path: Path, pid: object, role: str | None) -> None:
    (tmp_path / "state" / "pid").write_text(f"{pid}\n")
    if role is not None:
        (tmp_path / "state" / "role").write_text(f"{role}\n")


@pytest.mark.parametrize("role", ["standby", "primary"])
def test_the_check_passes_a_live_backbone_after_looking_for_most_of_a_second(tmp_path, scripts, sleeper, looks,
                                                                           role):
    state_files(tmp_path, sleeper.pid, role)
    started = time.monotonic()
    assert run_script(scripts[CHECK]) == 0
    assert time.monotonic() - started >= 0.85  # its deadline: 0.9 s of /proc/uptime, in hundredths
    assert set(pauses(looks)) == {"0.1"}


@pytest.mark.parametrize("pid, role", [
    ("SLEEPER", "fenced"),
    ("SLEEPER", "starting"),
    ("SLEEPER", None),
    ("", "standby"),
    ("12ab", "standby"),
    ("DEAD", "standby"),
])
def test_the_check_fails_at_the_first_look_on_a_fenced_missing_or_dead_backbone(tmp_path, scripts, sleeper, looks,
                                                                               pid, role):
    if pid == "DEAD":
        sleeper.kill()
    state_files(tmp_path, sleeper.pid if pid in ("SLEEPER", "DEAD") else pid, role)
    assert run_script(scripts[CHECK]) == 1
    assert pauses(looks) == []


def test_the_check_fails_one_look_on_a_backbone_other_than_the_one_it_saw_last(tmp_path, scripts, sleeper, looks):
    """A backbone restarted between two looks, its state directory lost: only the check's own record outside that
    directory tells it ran before; one failed look makes keepalived move the address."""
    state_files(tmp_path, sleeper.pid, "standby")
    assert run_script(scripts[CHECK]) == 0
    assert (tmp_path / "scripts" / "seen").read_text() == f"{sleeper.pid}\n"
    with ChildProcess(["/bin/sleep", "60"], tmp_path / "restarted.log") as restarted:
        state_files(tmp_path, restarted.pid, "primary")
        done = len(pauses(looks))
        assert run_script(scripts[CHECK]) == 1
        assert len(pauses(looks)) == done  # at the first look
        assert run_script(scripts[CHECK]) == 0  # the new process is the one seen last now
        assert (tmp_path / "scripts" / "seen").read_text() == f"{restarted.pid}\n"


def test_the_check_fails_without_any_state_files(scripts):
    assert run_script(scripts[CHECK]) == 1


def test_the_check_fails_at_its_next_look_once_the_backbone_is_stopped(tmp_path, scripts, sleeper, looks):
    state_files(tmp_path, sleeper.pid, "standby")
    check = subprocess.Popen(["/bin/sh", str(scripts[CHECK])])
    try:
        wait_until(lambda: pauses(looks), EVENT_WITHIN, "the check's first pause")
        os.kill(sleeper.pid, signal.SIGSTOP)
        assert check.wait(timeout=5) == 1
    finally:
        os.kill(sleeper.pid, signal.SIGCONT)
        if check.poll() is None:
            check.kill()
            check.wait()


def test_promote_and_demote_signal_the_backbone_in_the_state_directory(tmp_path, scripts):
    with ChildProcess([sys.executable, str(STANDIN), str(tmp_path / "state")], tmp_path / "standin.log") as standin:
        wait_until(lambda: (tmp_path / "state" / "pid").exists(), EVENT_WITHIN, "the stand-in's pid file")
        role = tmp_path / "state" / "role"
        assert run_script(scripts[PROMOTE]) == 0
        wait_until(lambda: role.read_text() == "primary\n", EVENT_WITHIN, "promotion")
        assert run_script(scripts[DEMOTE]) == 0
        wait_until(lambda: role.read_text() == "standby\n", EVENT_WITHIN, "demotion")
        signals = [line.split()[0] for line in (tmp_path / "state" / "signals").read_text().splitlines()]
        assert signals == ["SIGUSR1", "SIGUSR2"]
        assert standin.alive()


def test_promote_and_demote_without_a_backbone_exit_quietly(scripts):
    assert run_script(scripts[PROMOTE]) == 0 and run_script(scripts[DEMOTE]) == 0


@pytest.mark.skipif(pair_hosts.unavailable() is not None, reason=str(pair_hosts.unavailable()))
def test_keepalived_accepts_the_configuration_of_both_hosts(tmp_path):
    with PairHosts(tmp_path / "pair") as pair:
        for host, peer in (("a", "b"), ("b", "a")):
            config = tmp_path / f"keepalived-{host}.conf"
            done = cli(tmp_path, "--src", str(pair.address(host)), "--peer", str(pair.address(peer)),
                       "--vip", str(pair.vip), "--scripts-dir", str(tmp_path / f"scripts-{host}"))
            assert done.returncode == 0, done.stderr
            config.write_text(done.stdout.decode())
            test = subprocess.run([*pair.hosts[host].prefix, "keepalived", "--config-test", "--use-file", str(config)],
                                  capture_output=True, text=True, timeout=30)
            # keepalived says nothing about a good file (and exits 0 even when the file is missing: hence both checks)
            assert (test.returncode, test.stdout + test.stderr) == (0, ""), test.stderr
            assert f"unicast_src_ip {pair.address(host)}" in config.read_text()
