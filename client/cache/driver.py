"""The cache's driver: the pure :class:`~fyrehose.cache.core.Cache` driven by one :class:`fyrehose.Client`.

The client subscribes to the whole stream in sequence order, so this process
sees exactly the stream every other subscriber sees.  Events are taken in
batches and handed to :meth:`~fyrehose.cache.core.Cache.receive_messages`
and :meth:`~fyrehose.cache.core.Cache.receive_run` (a whole datagram) raw
(plain updates kept pending and folded when read), or, when the client
opened and verified them, to :meth:`~fyrehose.cache.core.Cache.receive_many`
(several updates of one subject conflated); whatever the cache returns is
published by a thread of its own (signed when ``--auth-db`` is given, in which
case the client has already dropped every envelope that failed verification).  A loss in the stream turns every
record stale, as the cache can no longer vouch for any of them.
"""
from __future__ import annotations

import gc
import queue
import signal
import sys
import threading
import time
from typing import TYPE_CHECKING

from fyrehose.runtime.readiness import announce_ready

if TYPE_CHECKING:
    from fyrehose.cache.core import Cache
    from fyrehose.drivers.client import Client
    from fyrehose.drivers.subscription import Subscription
    from fyrehose.protocol.codec import Address
    from fyrehose.protocol.frame_run import FrameRun
    from fyrehose.protocol.tracker import Event, Message
    from fyrehose.runtime.metrics import Metric
    from fyrehose.subjects.auth import Credentials
    from fyrehose.subjects.envelope import Envelope

GC_THRESHOLD = (50_000, 20, 20)  # the cycle collector's generation thresholds (Python's default: 700, 10, 10)
BATCH = 4096  # events applied together (conflated) at most: a snapshot waits for at most one batch before it


def serve(backbone: str, *, max_bytes: int, user: str, credentials: Credentials | None, session_interval: float,
          bind: Address | None, multicast: Address | None, metrics: Address | None = None) -> int:
    """Run the cache until SIGTERM: answer snapshots and initial values from the stream's last values.

    ``metrics``: serve the cache's position, lag, records and counters for Prometheus there
    (:func:`cache_metrics`, read from a thread of its own)."""
    from fyrehose.cache.core import Cache
    from fyrehose.drivers.client import Client
    from fyrehose.runtime.fatal import guarded
    from fyrehose.runtime.metrics import MetricsServer

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    cache = Cache(max_bytes)
    with Client(backbone, user=user, auth=credentials, session_interval=session_interval,
                bind=bind, multicast=multicast) as client:
        # Without authentication nothing needs each envelope opened on the receive thread: the raw stream
        # comes a datagram at a time and the cache reads of each message only what it needs.
        raw = client.auth is None
        stream = client.subscribe(None if raw else ">", on_loss="yield", announce=False)
        client.interest.add("_SNAP.>")  # what it answers, announced so gateways know requests there have a responder
        client.interest.add("_SUB.>")
        answers: queue.Queue[list[Envelope]] = queue.Queue()
        publisher = threading.Thread(target=guarded(lambda: _publish(client, answers, cache, stop), "cache publisher"),
                                     name="cache-publisher", daemon=True)
        publisher.start()
        session = client.session.name if client.session is not None else "none"
        announce_ready("cache", client.address, f"backbone {backbone}, session {session}, "
                                                f"max {max_bytes} bytes")
        position = [0]  # the last sequence applied (a list: the metrics thread reads it)
        connection = client.connection
        server = None if metrics is None else MetricsServer(metrics, lambda: cache_metrics(
            cache, position[0], connection.tracker.highest if connection.tracker is not None else 0)).start()
        _collect_less()
        while not stop.is_set():
            events = _batch(stream, raw)
            out = _apply(cache, events, raw, time.monotonic())
            if events:
                position[0] = _last_sequence(events[-1])
            if out:
                answers.put(out)
        publisher.join()
        if server is not None:
            server.stop()
        counts = dict(cache.stats) | ({f"auth {k}": v for k, v in client.auth.stats.items()} if client.auth else {})
    summary = " ".join(f"{name.replace(' ', '_')}={value}" for name, value in sorted(counts.items()))
    sys.stderr.write(f"fyrehose cache: {len(cache.records)} records, {cache.bytes} bytes; {summary}\n")
    return 0


def _last_sequence(event: Event | FrameRun) -> int:
    last = getattr(event, "last", None)  # a FrameRun
    if last is not None:
        return last
    to_seq = getattr(event, "to_seq", None)  # a Lost range
    return to_seq if to_seq is not None else event.seq  # type: ignore[union-attr]  # a message


def cache_metrics(cache: Cache, position: int, head: int) -> list[Metric]:
    """The cache in the Prometheus text format: where it is in the stream, how far behind, what it holds, its
    counters (``fyrehose_cache_<name>_total``: updates, snapshots, starts, stops, losses, ...)."""
    stats = {"updates": 0, "snapshots": 0, "losses": 0} | dict(cache.stats)  # a copy: the cache counts on meanwhile;
    # the counters the alert rules and the dashboard read exist from the start
    metrics: list[Metric] = [
        ("fyrehose_cache_position", "gauge", "the last backbone sequence the cache applied", [({}, position)]),
        ("fyrehose_cache_head", "gauge", "the highest sequence the backbone is known to have issued", [({}, head)]),
        ("fyrehose_cache_lag_messages", "gauge", "sequences issued that the cache has not applied yet",
         [({}, max(0, head - position))]),
        ("fyrehose_cache_records", "gauge", "subjects whose last value the cache holds", [({}, len(cache.records))]),
        ("fyrehose_cache_bytes", "gauge", "bytes the records hold (against --max-bytes)", [({}, cache.bytes)]),
    ]
    for name, count in sorted(stats.items()):
        metric = "fyrehose_cache_" + "".join(c if c.isalnum() else "_" for c in name) + "_total"
        metrics.append((metric, "counter", f"cache counter: {name}", [({}, count)]))
    return metrics


def _collect_less() -> None:
    """The stream allocates a few short-lived objects per message (the reader's messages, the scan's frame
    places), which set off the cycle collector thousands of times a second, each pass walking what survived:
    what exists once the cache runs is set aside for good, and a pass runs per GC_THRESHOLD allocations."""
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLD)


def _batch(stream: Subscription, raw: bool) -> list[Event | FrameRun]:
    """What the stream holds now (up to BATCH messages; datagrams kept whole when raw), waiting up to 0.2 s for the
    first."""
    return stream.get_many(BATCH, timeout=0.2, runs=raw)


def _apply(cache: Cache, events: list[Event | FrameRun], raw: bool, now: float) -> list[Envelope]:
    """Apply a batch in order (a loss turns every record stale where it happened); the answers to publish.

    ``raw``: the events are the raw stream, messages and whole datagrams,
    handed to the cache as (sequence, payload) pairs, a datagram as its first
    sequence and payloads (it reads only what it needs of each); otherwise the client opened the envelopes (a pattern
    subscription) and they are applied as envelopes.
    """
    from fyrehose.protocol.frame_run import FrameRun
    from fyrehose.protocol.tracker import Lost

    answers: list[Envelope] = []
    if raw:
        messages: list[Message] = []
        for event in events:
            if isinstance(event, FrameRun):  # a datagram's consecutive frames: the cache routes them together
                if messages:
                    answers += cache.receive_messages(messages, now)
                    messages = []
                answers += cache.receive_run(event.first, event.payloads(), now)
            elif isinstance(event, Lost):
                answers += cache.receive_messages(messages, now)
                messages = []
                cache.lost()
            else:
                messages.append(event)
        answers += cache.receive_messages(messages, now)
        return answers + cache.poll(now)
    opened: list[Envelope] = []
    seqs: list[int] = []  # each envelope's backbone sequence: the records keep it
    for event in events:
        if isinstance(event, Lost):
            answers += cache.receive_many(opened, now, seqs)
            opened, seqs = [], []
            cache.lost()
        else:
            opened.append(event.envelope)  # type: ignore[union-attr]  # a pattern subscription yields SubjectMessages
            seqs.append(event.seq)  # type: ignore[union-attr]
    answers += cache.receive_many(opened, now, seqs)
    return answers + cache.poll(now)


def _publish(client: Client, answers: queue.Queue[list[Envelope]], cache: Cache, stop: threading.Event) -> None:
    """Publish answers off the applying thread, so waiting for CONFIRMs never holds back the stream."""
    from fyrehose.drivers.client import FyrehoseError

    while not stop.is_set() or not answers.empty():
        try:
            batch = answers.get(timeout=0.2)
        except queue.Empty:
            continue
        while not answers.empty():
            batch += answers.get_nowait()
        try:
            client.publish_many(batch, timeout=2.0)
        except FyrehoseError as exc:  # the requesters retry; the cache keeps serving
            cache.stats["publish failures"] += 1
            sys.stderr.write(f"fyrehose cache: publishing {len(batch)} answers failed: {exc}\n")
