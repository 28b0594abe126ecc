"""``--multicast`` on the command line: a bad group, TTL or option mix is one line and a non-zero exit, before
any socket exists (these run in the host's namespace, so none may; the working paths are in test_multicast.py)."""
from __future__ import annotations

import pytest

from support import run_cli


@pytest.mark.parametrize("extra, message", [
    (["--multicast", "10.0.0.1:2324"], "10.0.0.1 in '10.0.0.1:2324' is not an IPv4 multicast group"),
    (["--multicast", "224.0.0.251:5353"], "is reserved for link-local protocols"),
    (["--multicast", "239.255.0.1:0"], "needs a port other than 0"),
    (["--multicast", "239.255.0.1"], "expected HOST:PORT"),
    (["--multicast", "239.255.0.1:2324", "--multicast-ttl", "256"], "--multicast-ttl must be between 0 and 255"),
    (["--multicast-ttl", "4"], "--multicast-ttl and --multicast-interface need --multicast GROUP:PORT"),
    (["--multicast-interface", "127.0.0.1"], "--multicast-ttl and --multicast-interface need --multicast GROUP:PORT"),
    (["--multicast", "239.255.0.1:2324", "--multicast-interface", "no.such.host.invalid"], "cannot resolve host"),
])
def test_a_backbone_refuses_a_bad_group_in_one_line(tmp_path, extra, message):
    done = run_cli("backbone", "--listen", "127.0.0.1:0", "--state-dir", str(tmp_path / "state"), *extra)
    err = done.stderr.decode().strip().splitlines()
    assert done.returncode == 1 and len(err) == 1 and err[0].startswith("fyrehose backbone: error: ")
    assert message in err[0]
    assert not (tmp_path / "state").exists()  # refused before anything was opened


@pytest.mark.parametrize("command", [["sub"], ["journal"], ["cache"], ["gateway", "redis"], ["gateway", "nats"],
                                     ["gateway", "marlin"]])
def test_every_subscribing_command_refuses_a_group_that_is_not_one(command):
    done = run_cli(*command, "--multicast", "192.168.1.1:2324")
    err = done.stderr.decode().strip().splitlines()
    assert done.returncode == 2 and "is not an IPv4 multicast group" in err[-1]


def test_the_publishing_only_gateway_has_no_multicast_option():
    done = run_cli("gateway", "lumberjack", "--multicast", "239.255.0.1:2324")
    assert done.returncode == 2 and "unrecognized arguments: --multicast" in done.stderr.decode()
