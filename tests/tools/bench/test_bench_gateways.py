"""``fyrehose bench`` targets redis-gateway and nats-gateway: the redis and nats load generators, pointed at gateways."""
from __future__ import annotations

import json

from fyrehose.tools.bench.servers import server_for
from fyrehose.tools.bench.targets import NATS, REDIS, TARGETS

from support import run_cli


def test_gateway_targets_use_the_redis_and_nats_load_generators():
    assert TARGETS["redis-gateway"].protocol == REDIS and TARGETS["redis-gateway"].gateway == "redis"
    assert TARGETS["nats-gateway"].protocol == NATS and TARGETS["nats-gateway"].gateway == "nats"
    assert TARGETS["redis-gateway-2"].gateway_workers == 2


def test_a_gateway_stack_starts_answers_and_stops_both_processes(tmp_path):
    server = server_for(TARGETS["nats-gateway"], {}, tmp_path / "stack", 0, None).start()
    try:
        processes = server.processes()
        assert set(processes) == {"server", "server/backbone"}
        assert server.alive()
    finally:
        server.stop()
    assert not server.alive()
    assert all(not process.is_running() or process.status() == "zombie" for process in processes.values())


def test_fixed_rate_run_through_both_gateways(tmp_path):
    out = tmp_path / "bench.json"
    done = run_cli("bench", "--targets", "redis-gateway,nats-gateway", "--subscribers", "2", "--duration", "1",
                   "--rate", "500", "--rounds", "1", "--json", str(out), timeout=180)
    assert done.returncode == 0, done.stderr.decode()
    doc = json.loads(out.read_text())
    assert [result["target"] for result in doc["results"]] == ["redis-gateway", "nats-gateway"]
    for result in doc["results"]:
        assert result["delivered_per_sub_per_s"] > 0
        assert {"server", "server/backbone", "subscriber-1", "subscriber-2"} <= set(result["cpu_percent"])
