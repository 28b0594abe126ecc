"""NATS PUBs without ``verbose`` are pipelined: reading goes on while the backbone confirms; a PONG still waits."""
from __future__ import annotations

import re
import threading

from gateway_support import GatewayProcess, RawNats
from support import BackboneProcess


def _read_messages(subscriber: RawNats, count: int, out: list[bytes]) -> None:
    data = subscriber.data
    while data.count(b"\r\nMSG ") + data.startswith(b"MSG ") < count:
        chunk = subscriber.sock.recv(1 << 20)
        if not chunk:
            break
        data += chunk
    out.extend(re.findall(rb"MSG pipe\.x 1 \d+\r\n(m\d+)\r\n", data))


def test_thousands_of_pubs_in_one_write_arrive_in_order_and_the_pong_follows_them(gateways):
    address = gateways["nats"].address
    subscriber = RawNats(address)
    subscriber.send(b"CONNECT {}\r\nSUB pipe.x 1\r\nPING\r\n")
    assert subscriber.line() == b"PONG"
    count = 20_000  # more than one client may have in flight: its reading pauses and resumes
    received: list[bytes] = []
    reader = threading.Thread(target=_read_messages, args=(subscriber, count, received))
    reader.start()
    publisher = RawNats(address)
    publisher.send(b"CONNECT {}\r\n" + b"".join(b"PUB pipe.x %d\r\nm%d\r\n" % (len(b"m%d" % n), n)
                                                  for n in range(count)) + b"PING\r\n")
    assert publisher.line() == b"PONG"
    reader.join(30)
    assert received == [b"m%d" % n for n in range(count)]
    subscriber.sock.close()
    publisher.sock.close()


def test_a_pub_the_backbone_never_confirms_gets_an_error_and_no_pong(tmp_path):
    backbone = BackboneProcess(tmp_path / "state").start()
    gateway = GatewayProcess("nats", backbone.address, tmp_path, ["--publish-timeout", "1"]).start()
    try:
        client = RawNats(gateway.address)
        client.send(b"CONNECT {}\r\nPING\r\n")
        assert client.line() == b"PONG"
        backbone.kill()
        client.send(b"PUB lost.x 2\r\nhi\r\nPING\r\n")
        rest = client.until_closed()
        assert b"-ERR 'Publish Failed" in rest and b"PONG" not in rest
    finally:
        gateway.kill()
        backbone.kill()
