"""``fyrehose bench client``: each system driven through its own Python client, as a user's script would.

One publisher process publishes ``messages`` payloads in batches of
``batch`` (``Client.publish_many``, a redis-py pipeline, nats-py
``publish`` for each then ``flush``); one subscriber process iterates with
the client's own API (iterating a ``Subscription``, ``PubSub.listen()``,
``async for`` over a nats-py subscription's ``messages``, or a nats-py
message callback, its fastest way).  Each reports monotonic times
(one clock for every process on the host) and its own CPU time, so the
orchestrator measures messages/s from the first publish to the last message
iterated, and each side's CPU cost per message.
"""
from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection

from fyrehose.protocol.codec import Address
from fyrehose.tools.bench.loadgen import _await_start, _describe, _leave_interrupts_to_the_orchestrator
from fyrehose.tools.bench.targets import FYREHOSE, NATS, REDIS

SUBJECT = "bench"
READY_TIMEOUT = 10.0


# what a subscriber iterated: messages, messages lost, and (fyrehose) its recovery: REQUESTs sent and the seconds
# from noticing each hole to filling it
Iterated = tuple[int, int, dict]


@dataclass(frozen=True)
class ClientSpec:
    protocol: str
    address: Address
    messages: int
    batch: int
    payload: int
    callback: bool = False  # nats only: consume with a message callback instead of iterating


def _chunks(spec: ClientSpec) -> list[list[bytes]]:
    """The batches to publish: distinct payloads (a counter, padded to the size), built before the clock starts."""
    digits = min(spec.payload, 12)
    payloads = [(b"%0*d" % (digits, i))[-digits:] + b"x" * (spec.payload - digits) for i in range(spec.messages)]
    return [payloads[start:start + spec.batch] for start in range(0, spec.messages, spec.batch)]


# ---------------------------------------------------------------- one publisher and one subscriber per system


def _fyrehose_publish(spec: ClientSpec, ready: Callable[[], None]) -> None:
    from fyrehose import Client

    chunks = _chunks(spec)
    with Client(spec.address, subscribe=False) as client:
        ready()
        for chunk in chunks:
            client.publish_many(chunk)


def _fyrehose_subscribe(spec: ClientSpec, ready: Callable[[], None]) -> Iterated:
    from fyrehose import Client
    from fyrehose.protocol.tracker import Lost

    received = lost = 0
    with Client(spec.address) as client:
        stream = client.subscribe(on_loss="yield")
        ready()
        for event in stream:
            if isinstance(event, Lost):
                lost += event.count
            else:
                received += 1
            if received + lost >= spec.messages:
                break
        tracker = client.connection.tracker
        recovery = {"requests": client.stats["requests"],
                    "recoveries": list(tracker.recoveries) if tracker is not None else []}
    return received, lost, recovery


def _redis_publish(spec: ClientSpec, ready: Callable[[], None]) -> None:
    import redis

    chunks = _chunks(spec)
    client = redis.Redis(host=spec.address[0], port=spec.address[1])
    try:
        client.ping()
        ready()
        for chunk in chunks:
            pipe = client.pipeline(transaction=False)
            for payload in chunk:
                pipe.publish(SUBJECT, payload)
            pipe.execute()
    finally:
        client.close()


def _redis_subscribe(spec: ClientSpec, ready: Callable[[], None]) -> Iterated:
    import redis

    client = redis.Redis(host=spec.address[0], port=spec.address[1])
    pubsub = client.pubsub()
    received = 0
    try:
        pubsub.subscribe(SUBJECT)
        if pubsub.get_message(timeout=READY_TIMEOUT) is None:  # the subscribe confirmation
            raise TimeoutError("redis-server did not confirm the subscription")
        ready()
        for message in pubsub.listen():
            if message["type"] == "message":
                received += 1
                if received >= spec.messages:
                    break
    finally:
        pubsub.close()
        client.close()
    return received, 0, {}


def _nats_publish(spec: ClientSpec, ready: Callable[[], None]) -> None:
    import nats

    chunks = _chunks(spec)

    async def main() -> None:
        client = await nats.connect(f"nats://{spec.address[0]}:{spec.address[1]}")
        try:
            ready()
            for chunk in chunks:
                for payload in chunk:
                    await client.publish(SUBJECT, payload)
                await client.flush()
        finally:
            await client.close()

    asyncio.run(main())


def _nats_subscribe(spec: ClientSpec, ready: Callable[[], None]) -> Iterated:
    """``async for`` over the subscription's messages, or (``spec.callback``) a message callback: nats-py's fastest."""
    import nats

    async def main() -> int:
        client = await nats.connect(f"nats://{spec.address[0]}:{spec.address[1]}")
        received = 0
        done = asyncio.Event()

        async def on_message(_message) -> None:
            nonlocal received
            received += 1
            if received >= spec.messages:
                done.set()

        try:
            subscription = await client.subscribe(
                SUBJECT, cb=on_message if spec.callback else None, pending_msgs_limit=spec.messages + 1,
                pending_bytes_limit=(spec.payload + 256) * (spec.messages + 1))
            await client.flush()
            ready()
            if spec.callback:
                await done.wait()
            else:
                async for _ in subscription.messages:
                    received += 1
                    if received >= spec.messages:
                        break
        finally:
            await client.close()
        return received

    return asyncio.run(main()), 0, {}


_PUBLISHERS = {FYREHOSE: _fyrehose_publish, REDIS: _redis_publish, NATS: _nats_publish}
_SUBSCRIBERS = {FYREHOSE: _fyrehose_subscribe, REDIS: _redis_subscribe, NATS: _nats_subscribe}


# ---------------------------------------------------------------- the forked processes


def publisher_main(conn: Connection, spec: ClientSpec) -> None:
    """Reports ready, waits for start, publishes everything: {first, last, cpu} (monotonic s, CPU s)."""
    _leave_interrupts_to_the_orchestrator()
    times: dict[str, float] = {}

    def ready() -> None:
        conn.send(("ready", os.getpid()))
        if _await_start(conn) is None:
            raise TimeoutError("no start from the orchestrator")
        times["cpu"] = time.process_time()
        times["first"] = time.monotonic()

    try:
        _PUBLISHERS[spec.protocol](spec, ready)
        times["last"] = time.monotonic()
        times["cpu"] = time.process_time() - times["cpu"]
        conn.send(("result", times))
    except Exception as exc:  # reported to the orchestrator, which ends the run with it
        conn.send(("error", _describe(exc)))
    finally:
        conn.close()


def subscriber_main(conn: Connection, spec: ClientSpec) -> None:
    """Subscribes, reports ready, iterates until every message arrived: {received, lost, last, cpu}, and for
    fyrehose {requests, recoveries}."""
    _leave_interrupts_to_the_orchestrator()
    start: dict[str, float] = {}

    def ready() -> None:
        start["cpu"] = time.process_time()
        conn.send(("ready", os.getpid()))

    try:
        received, lost, recovery = _SUBSCRIBERS[spec.protocol](spec, ready)
        last = time.monotonic()
        conn.send(("result", {"received": received, "lost": lost, "last": last,
                              "cpu": time.process_time() - start["cpu"], **recovery}))
    except Exception as exc:  # reported to the orchestrator, which ends the run with it
        conn.send(("error", _describe(exc)))
    finally:
        conn.close()
