"""The reflection attack itself, with forged source addresses, inside a network namespace this test creates.

A raw socket sends KEEPALIVEs whose IP source and ADDR are a victim's
(127.0.0.5:7777, a socket that never sent the backbone anything) while a
publisher publishes.  Without ``--validate-addresses`` the backbone sends the
victim the stream; with it, at most one 9-byte COOKIE per time slot, whatever
the forged KEEPALIVEs carry.  Forged packets exist only inside the namespace.
"""
from __future__ import annotations

import socket
import struct
import threading
import time

import pytest

from fyrehose import Client
from fyrehose.backbone.cookies import SLOT_SECONDS
from fyrehose.protocol import codec
from fyrehose.tools.bench.netns import Namespace

from netns import namespaces_available
from support import BackboneProcess

VICTIM = ("127.0.0.5", 7777)
MESSAGES = 20_000
FORGED = 3


def forged_udp(source: tuple[str, int], destination: tuple[str, int], payload: bytes) -> bytes:
    """An IPv4 packet carrying one UDP datagram from ``source`` (which did not send it); UDP checksum 0 (none)."""
    udp = struct.pack(">HHHH", source[1], destination[1], 8 + len(payload), 0) + payload
    header = struct.pack(">BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 0, 0, 64, socket.IPPROTO_UDP, 0,
                         socket.inet_aton(source[0]), socket.inet_aton(destination[0]))
    words = sum(struct.unpack(">10H", header))
    while words >> 16:
        words = (words & 0xFFFF) + (words >> 16)
    header = header[:10] + struct.pack(">H", ~words & 0xFFFF) + header[12:]
    return header + udp


class Victim:
    """A socket at the victim's address, counting every datagram and byte that reaches it."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        self.sock.bind(VICTIM)
        self.sock.settimeout(0.1)
        self.datagrams: list[bytes] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while not self._stop.is_set():
            try:
                self.datagrams.append(self.sock.recv(65536))
            except TimeoutError:
                continue

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sock.close()


def attack(backbone: BackboneProcess, keepalive: bytes) -> tuple[list[bytes], float]:
    """FORGED forged KEEPALIVEs spread over MESSAGES published messages; what the victim got, and for how long."""
    victim = Victim()
    raw = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
    started = time.monotonic()
    try:
        with Client(backbone.addr, subscribe=False) as publisher:
            packet = forged_udp(VICTIM, backbone.addr, keepalive)
            for _ in range(FORGED):
                raw.sendto(packet, (backbone.addr[0], 0))
                publisher.publish_many([b"m%07d" % i for i in range(MESSAGES // FORGED)], timeout=20)
        time.sleep(1.0)  # the stream's tail on its way to the victim: an upper bound, nothing asserts on it
    finally:
        raw.close()
        victim.close()
    return victim.datagrams, time.monotonic() - started


@pytest.mark.skipif(namespaces_available() is not None, reason=str(namespaces_available()))
@pytest.mark.parametrize("workers", [0, 2], ids=lambda w: f"workers={w}")
def test_a_forged_keepalive_aims_the_stream_only_at_a_backbone_that_does_not_validate(tmp_path, workers):
    keepalive = codec.encode(codec.Keepalive(VICTIM[0], VICTIM[1], 0, b"f" * 16))
    with_cookie = codec.encode(codec.Keepalive(VICTIM[0], VICTIM[1], 0, b"f" * 16, cookie=b"c" * 8))
    with Namespace() as namespace, namespace.inside():
        backbone = BackboneProcess(tmp_path / "open", workers=workers, prefix=namespace.prefix).start()
        try:
            before, _ = attack(backbone, keepalive)
        finally:
            backbone.stop()
        results = []
        for name, forged in (("plain", keepalive), ("forged cookie", with_cookie)):
            backbone = BackboneProcess(tmp_path / name, workers=workers, prefix=namespace.prefix,
                                       extra=["--validate-addresses"]).start()
            try:
                after, seconds = attack(backbone, forged)
                cookies = backbone.metric("fyrehose_cookies_total")
            finally:
                backbone.stop()
            results.append((name, after, seconds, cookies))
    sent = FORGED * len(keepalive)
    print(f"workers={workers}: {FORGED} forged KEEPALIVEs ({sent} bytes) during {MESSAGES} messages: "
          f"without --validate-addresses the victim got {len(before)} datagrams, {sum(map(len, before))} bytes")
    assert len(before) > 100 and sum(map(len, before)) > 100 * sent  # the attack works on an open backbone
    assert any(data[0] == codec.DELIVER for data in before)
    for name, after, seconds, cookies in results:
        print(f"  with it ({name}): {len(after)} datagrams, {sum(map(len, after))} bytes in {seconds:.1f} s")
        assert all(data[0] == codec.COOKIE and len(data) == codec.COOKIE_FRAME_SIZE for data in after)
        assert len(after) <= seconds // SLOT_SECONDS + 2  # at most one per slot the attack touched
        assert cookies == len(after) + 2  # and one each to the readiness probe and the publisher
