"""The alert rules on a real standby pair: two backbone hosts and a client host in network namespaces, keepalived
moving the service address (tools/bench/pair_hosts.py), and Prometheus on the client host scraping both members.
Killing the standby fires FyrehoseStandbyDetached; killing the primary moves the address, and the promoted
standby fires FyrehoseTakeover while the dead one fires FyrehoseTargetDown.  The rules are a copy whose ``for:``
is 1 s; every wait is an upper bound."""
from __future__ import annotations

import subprocess

import pytest

from fyrehose.tools.bench.failover import Pair
from fyrehose.tools.bench.pair_hosts import PAIR, PairHosts, unavailable

from ops_support import PrometheusApi, pending_rules, prometheus_argv, prometheus_config, wait_firing
from support import EVENT_WITHIN, wait_until

pytestmark = pytest.mark.skipif(unavailable() is not None, reason=f"a standby pair in namespaces: {unavailable()}")

METRICS_PORT = 9100  # each host's own address: the namespaces keep their ports apart
PROMETHEUS = "127.0.0.1:9090"  # the client host's own loopback


def test_a_killed_standby_and_a_killed_primary_fire_their_alerts(tmp_path):
    with PairHosts(tmp_path / "net") as net:
        pair = Pair(net, tmp_path, sync=False, key=False, metrics_port=METRICS_PORT)
        wait_until(lambda: len(net.vip_holders()) == 1, EVENT_WITHIN, "one host holding the service address", interval=0.05)
        primary = pair.primary_once_promoted(10)
        standby = PAIR[1 - PAIR.index(primary)]
        pair.wait_role(standby, "standby", 10)
        instance = {host: f"{net.address(host)}:{METRICS_PORT}" for host in PAIR}
        root = tmp_path / "prometheus"
        root.mkdir()
        config = prometheus_config(root, {"fyrehose-backbone": list(instance.values())}, pending_rules(root))
        process = net.start("client", prometheus_argv(root, config, PROMETHEUS))

        def fetch(url: str) -> bytes:  # from inside the client host, where Prometheus listens
            return subprocess.run(net.hosts["client"].prefix + ["curl", "-sf", "--max-time", "5", url],
                                  capture_output=True, timeout=20, check=True).stdout

        prometheus = PrometheusApi(f"http://{PROMETHEUS}", fetch)
        wait_until(lambda: process.poll() is None and prometheus.ready(), 60, "prometheus ready")
        wait_until(lambda: {target["health"] for target in prometheus.api("targets")["activeTargets"]} == {"up"},
                   60, "both members scraped")
        wait_until(lambda: prometheus.query("sum(fyrehose_pair_role_primary) == 1"), 60, "one primary scraped")
        assert not {alert for alert in prometheus.firing() if alert[0] in (
            "FyrehoseNoPrimary", "FyrehoseTwoPrimaries", "FyrehoseStandbyDetached", "FyrehoseTargetDown")}

        pair.net.stop(pair.backbones[standby], 0)  # kill the standby
        wait_firing(prometheus, "FyrehoseStandbyDetached", "fyrehose-backbone")
        assert ("FyrehoseStandbyDetached", "fyrehose-backbone", instance[primary]) in prometheus.firing()

        pair.start_backbone(standby)
        pair.wait_role(standby, "standby", 30)
        wait_until(lambda: ("FyrehoseStandbyDetached", "fyrehose-backbone", instance[primary])
                   not in prometheus.firing(), 60, "the standby attached again")
        pair.net.stop(pair.backbones[primary], 0)  # kill the primary: keepalived moves the address
        pair.wait_role(standby, "primary", 30)
        wait_firing(prometheus, "FyrehoseTakeover", "fyrehose-backbone")
        assert ("FyrehoseTakeover", "fyrehose-backbone", instance[standby]) in prometheus.firing()
        wait_firing(prometheus, "FyrehoseTargetDown", "fyrehose-backbone")
        assert ("FyrehoseTargetDown", "fyrehose-backbone", instance[primary]) in prometheus.firing()
