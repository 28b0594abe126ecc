"""The client host's half of ``fyrehose bench failover``: a confirmed publisher and a subscriber on the service address.

Run inside the client namespace as ``python -m fyrehose.tools.bench.failover_client HOST:PORT RATE``; it takes
one command per line on stdin and answers each with one JSON line on stdout, so the orchestrator, which kills
backbones in the other namespaces, decides when each phase begins:

- ``paced SECONDS RATE``: confirmed ``publish_many`` batches of PACED_BATCH offered at RATE msgs/s for
  SECONDS, so that the backbone's CPU per message is measured at the same load with and without a standby;
- ``cost SECONDS SAMPLES``: confirmed throughput (``publish_many`` for SECONDS) and CONFIRM latency
  (SAMPLES ``publish`` calls one at a time), for the with/without-standby comparison;
- ``stream``: from now on publish one message every 1/RATE s with ``publish`` (it waits for the CONFIRM, and
  retries across a takeover) while a subscriber records every event;
- ``finish GRACE``: stop publishing, give the subscriber GRACE seconds to settle, report everything and exit.

Times are ``time.monotonic()``, the same clock in every namespace of the machine.
"""
from __future__ import annotations

import json
import statistics
import sys
import threading
import time

from fyrehose import Client
from fyrehose.errors import FyrehoseError
from fyrehose.protocol.tracker import Lost, Message

ID_SIZE = 12  # the payload: the publish's index, zero-padded
PACED_BATCH = 256  # messages per publish_many call of the paced step (one datagram)


class Stream:
    def __init__(self, backbone: str, rate: float) -> None:
        self.backbone = backbone
        self.interval = 1.0 / rate
        self.stopping = threading.Event()  # the publisher stops
        self.settled = threading.Event()  # the subscriber stops, once what was published had time to arrive
        self.published: list[tuple[int, float, int]] = []  # (index, sent at, sequence or -1: raised)
        self.events: list[tuple[str, int, int, float]] = []  # ("m", seq, index, at) or ("lost"/reason, from, to, at)
        self._subscriber = Client(backbone)
        self._subscription = self._subscriber.subscribe(on_loss="yield")
        self._threads = [threading.Thread(target=self._publish, daemon=True),
                         threading.Thread(target=self._receive, daemon=True)]
        for thread in self._threads:
            thread.start()

    def _publish(self) -> None:
        with Client(self.backbone, subscribe=False) as publisher:
            index = 0
            due = time.monotonic()
            while not self.stopping.is_set():
                sent = time.monotonic()
                try:
                    seq = publisher.publish(b"%0*d" % (ID_SIZE, index), timeout=10.0)
                except FyrehoseError:
                    seq = -1
                self.published.append((index, sent, seq))
                index += 1
                due = max(due + self.interval, time.monotonic() - 1.0)  # catch up after a stall, within 1 s
                self.stopping.wait(max(0.0, due - time.monotonic()))

    def _receive(self) -> None:
        subscription = self._subscription
        while not self.settled.is_set() or subscription.queued:
            event = subscription.get(timeout=0.1)
            now = time.monotonic()
            if isinstance(event, Message):
                index = int(event.data) if len(event.data) == ID_SIZE and event.data.isdigit() else -1
                self.events.append(("m", event.seq, index, now))
            elif isinstance(event, Lost):
                self.events.append((event.reason, event.from_seq, event.to_seq, now))

    def finish(self, grace: float) -> dict:
        self.stopping.set()
        self._threads[0].join(15)
        time.sleep(grace)
        self.settled.set()
        self._threads[1].join(5)
        self._subscriber.close()
        return {"published": self.published, "events": self.events}


def paced(backbone: str, seconds: float, rate: float) -> dict:
    """Confirmed ``publish_many`` batches offered at ``rate`` msgs/s; what was sent and the rate reached."""
    with Client(backbone, subscribe=False) as publisher:
        batch = [b"%0*d" % (ID_SIZE, i) for i in range(PACED_BATCH)]
        sent = 0
        started = due = time.monotonic()
        while (now := time.monotonic()) - started < seconds:
            if due > now:
                time.sleep(due - now)
            sent += len(publisher.publish_many(batch))
            due += PACED_BATCH / rate
        return {"messages": sent, "rate": sent / (time.monotonic() - started)}


def cost(backbone: str, seconds: float, samples: int) -> dict:
    """Confirmed msgs/s through publish_many and the CONFIRM latency of publish, one client."""
    with Client(backbone, subscribe=False) as publisher:
        batch = [b"%0*d" % (ID_SIZE, i) for i in range(2048)]
        sent = 0
        started = time.monotonic()
        while time.monotonic() - started < seconds:
            sent += len(publisher.publish_many(batch))
        throughput = sent / (time.monotonic() - started)
        latencies = []
        for i in range(samples):
            began = time.perf_counter()
            publisher.publish(b"%0*d" % (ID_SIZE, i))
            latencies.append((time.perf_counter() - began) * 1000)
    latencies.sort()
    return {"throughput": throughput, "messages": sent + samples, "confirm_p50_ms": statistics.median(latencies),
            "confirm_p99_ms": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]}


def main() -> int:
    backbone, rate = sys.argv[1], float(sys.argv[2])
    stream: Stream | None = None
    for line in sys.stdin:
        words = line.split()
        if not words:
            continue
        if words[0] == "paced":
            answer = paced(backbone, float(words[1]), float(words[2]))
        elif words[0] == "cost":
            answer = cost(backbone, float(words[1]), int(words[2]))
        elif words[0] == "stream":
            stream = Stream(backbone, rate)
            answer = {"started": time.monotonic()}
        elif words[0] == "finish" and stream is not None:
            answer = stream.finish(float(words[1]))
            print(json.dumps(answer), flush=True)
            return 0
        else:
            answer = {"error": f"unknown command {line.strip()!r}"}
        print(json.dumps(answer), flush=True)
    return 1


if __name__ == "__main__":
    sys.exit(main())
