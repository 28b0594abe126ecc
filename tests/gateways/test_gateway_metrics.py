"""``--metrics`` on every gateway kind: its counters, clients and refusals for Prometheus."""
from __future__ import annotations

import socket
import urllib.request

import pytest

from support import free_port, wait_until


def scrape(port: int) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read().decode()
    values = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            values[name] = float(value)
    return values



@pytest.mark.parametrize("kind", ["redis", "nats", "marlin", "lumberjack"])
def test_a_gateway_serves_its_clients_and_refusals_for_prometheus(gateway_factory, kind):
    port = free_port(socket.SOCK_STREAM)
    gateway = gateway_factory(kind, "--metrics", f"127.0.0.1:{port}", "--max-clients-per-address", "1")
    held = socket.create_connection(gateway.address, timeout=30)
    try:
        wait_until(lambda: scrape(port).get(f'fyrehose_gateway_clients{{kind="{kind}"}}') == 1, timeout=60,
                   what="one client counted")
        refused = socket.create_connection(gateway.address, timeout=30)
        while refused.recv(4096):
            pass
        refused.close()
        values = scrape(port)
        assert values[f'fyrehose_gateway_refused_connections_per_address_total{{kind="{kind}"}}'] == 1
        assert values[f'fyrehose_gateway_up{{kind="{kind}"}}'] == 1
    finally:
        held.close()
