"""Reading metrics endpoints: whatever answers at an endpoint (nothing, silence, not HTTP, an HTTP error, a body
that is not the metrics format) becomes a reason in that endpoint's row, never an error of the command."""
from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from fyrehose.runtime.metrics import MetricsServer
from fyrehose.tools.watch.scrape import Scraper, read_one

from support import LOOPBACK


@contextmanager
def answering(reply: bytes | None) -> Iterator[str]:
    """A TCP server on loopback that reads a request and writes ``reply`` (None: says nothing), for one client."""
    server = socket.create_server((LOOPBACK, 0))
    server.settimeout(10)
    done = threading.Event()

    def serve() -> None:
        try:
            client, _ = server.accept()
        except OSError:
            return
        with client:
            client.recv(4096)
            if reply is not None:
                client.sendall(reply)
            else:
                done.wait(10)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://{LOOPBACK}:{server.getsockname()[1]}/metrics"
    finally:
        done.set()
        server.close()
        thread.join(10)


@pytest.mark.parametrize("reply, reason", [
    (b"-ERR unknown command 'GET'\r\n", "BadStatusLine"),
    (b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n", "HTTP 404 Not Found"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 20\r\n\r\n<html>hello</html>\r\n", "a metric name was expected"),
    (b"", "RemoteDisconnected"),
    (None, "timed out"),
])
def test_what_answers_at_an_endpoint_becomes_the_reason_in_its_row(reply, reason):
    with answering(reply) as url:
        reading = read_one(url, timeout=1.0)
    assert reading.scrape is None and reason in reading.error
    assert reading.endpoint == url.removeprefix("http://").removesuffix("/metrics")


def test_every_endpoint_is_read_at_once_and_a_dead_one_does_not_hold_up_the_others():
    metrics = MetricsServer((LOOPBACK, 0), lambda: [("fyrehose_pushes_total", "counter", "pushes", [({}, 7)])])
    metrics.start()
    try:
        live = f"http://{LOOPBACK}:{metrics.address[1]}/metrics"
        with answering(None) as silent, Scraper([live, silent], timeout=1.0) as scraper:
            readings = scraper.read()
    finally:
        metrics.stop()
    assert readings[0].scrape is not None and readings[0].scrape.total("fyrehose_pushes_total") == 7
    assert readings[1].scrape is None and "timed out" in readings[1].error
