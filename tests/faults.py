"""A UDP relay that injects loss, reordering and duplication in both directions.

The client talks to the relay as if it were the backbone; the backbone sees the
relay's back socket as the client.  Every datagram, whichever way it goes, is
independently dropped with probability ``drop``, sent twice with probability
``duplicate``, or held back and sent after the next datagram in the same
direction with probability ``reorder`` (a held datagram is released at most
``hold`` seconds later even if nothing follows).  A seeded ``random.Random``
makes a run repeatable up to thread timing.
"""
from __future__ import annotations

import random
import socket
import threading
import time
from collections import Counter

LOOPBACK = "127.0.0.1"


class FaultRelay:
    def __init__(self, backbone: tuple[str, int], *, drop: float = 0.0, reorder: float = 0.0,
                 duplicate: float = 0.0, seed: int = 0, hold: float = 0.05) -> None:
        self.backbone = backbone
        self.drop, self.reorder, self.duplicate, self.hold = drop, reorder, duplicate, hold
        self.front = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)  # faces the client
        self.back = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)  # faces the backbone and other clients
        for sock in (self.front, self.back):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
            sock.bind((LOOPBACK, 0))
            sock.settimeout(0.02)
        self.addr = self.front.getsockname()
        self.client: tuple[str, int] | None = None
        self.counts: Counter[str] = Counter()  # "up dropped", "down duplicated", ...
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._pump, args=("up", self.front, self.back, random.Random(seed)), daemon=True),
            threading.Thread(target=self._pump, args=("down", self.back, self.front, random.Random(seed + 1)),
                             daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def _destination(self, direction: str) -> tuple[str, int] | None:
        return self.backbone if direction == "up" else self.client

    def _pump(self, direction: str, source: socket.socket, sink: socket.socket, rng: random.Random) -> None:
        held: tuple[bytes, float] | None = None
        while not self._stop.is_set():
            try:
                data, sender = source.recvfrom(65536)
            except TimeoutError:
                if held is not None and time.monotonic() - held[1] >= self.hold:
                    self._send(direction, sink, held[0])
                    held = None
                continue
            except OSError:
                continue
            if direction == "up":
                self.client = sender
            self._count(direction, "received")
            roll = rng.random()
            if roll < self.drop:
                self._count(direction, "dropped")
                continue
            if roll < self.drop + self.reorder and held is None:
                held = (data, time.monotonic())
                self._count(direction, "reordered")
                continue
            self._send(direction, sink, data)
            if rng.random() < self.duplicate:
                self._send(direction, sink, data)
                self._count(direction, "duplicated")
            if held is not None:
                self._send(direction, sink, held[0])
                held = None

    def _send(self, direction: str, sink: socket.socket, data: bytes) -> None:
        destination = self._destination(direction)
        if destination is not None:
            try:
                sink.sendto(data, destination)
            except OSError:
                self._count(direction, "send failed")

    def _count(self, direction: str, what: str) -> None:
        with self._lock:
            self.counts[f"{direction} {what}"] += 1

    def close(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(2)
        self.front.close()
        self.back.close()

    def __enter__(self) -> FaultRelay:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
