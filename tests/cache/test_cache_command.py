"""``fyrehose cache`` as a process on a real backbone: initial values, snapshots, eviction, bad arguments."""
from __future__ import annotations

import json
import threading
import time

import pytest

from fyrehose import Client
from fyrehose.subjects.envelope import MsgType, Status

from support import CacheProcess, run_cli, take_until


def test_a_late_subscriber_gets_the_initial_value_then_updates(backbone, tmp_path):
    with CacheProcess(backbone, tmp_path) as cache, Client(backbone.addr, subscribe=False) as publisher:
        publisher.publish(b'{"bid":10,"ask":11}', subject="NASDAQ.INTC")
        publisher.publish(b'{"ask":12}', subject="NASDAQ.INTC")
        publisher.publish(b'{"bid":1}', subject="NASDAQ.MSFT")
        with Client(backbone.addr, user="late") as late:
            stream = late.subscribe("NASDAQ.INTC", initial=True)
            initial = stream.get(timeout=10)
            assert (initial.subject, initial.type, initial.status) == ("NASDAQ.INTC", MsgType.INITIAL, Status.OK)
            assert json.loads(initial.data) == {"bid": 10, "ask": 12}
            publisher.publish(b'{"bid":13}', subject="NASDAQ.INTC")
            update = stream.get(timeout=10)
            assert (update.type, update.data) == (MsgType.UPDATE, b'{"bid":13}')
            assert stream.get(timeout=0.3) is None  # MSFT never matches, the answer came once
    assert cache.summary()["starts"] == 1


def test_initial_value_is_never_overtaken_by_older_state(backbone, tmp_path):
    """Updates race the START: whatever the timing, the subscriber's view only moves forward."""
    with CacheProcess(backbone, tmp_path), Client(backbone.addr, subscribe=False) as publisher:
        publisher.publish(b'{"n":0}', subject="count.x")
        done = threading.Event()

        def count() -> None:
            for n in range(1, 301):
                publisher.publish(f'{{"n":{n}}}'.encode(), subject="count.x")
            done.set()

        counter = threading.Thread(target=count)
        counter.start()
        time.sleep(0.05)
        try:
            with Client(backbone.addr, user="late") as late:
                stream = late.subscribe("count.x", initial=True)
                seen = []
                while not seen or seen[-1] != 300:
                    event = stream.get(timeout=10)
                    assert event is not None, f"stream stalled after {seen[-5:]}"
                    seen.append(json.loads(event.data)["n"])
        finally:
            counter.join(30)
        assert done.is_set()
        assert seen == list(range(seen[0], 301))  # the initial, then every newer update once, in order


def test_snapshots_not_found_found_and_relocated(backbone, tmp_path):
    with CacheProcess(backbone, tmp_path), Client(backbone.addr, user="sam") as client:
        missing = client.snapshot("q.none", timeout=5)
        assert (missing.subject, missing.type, missing.status, missing.data, missing.record_seq) == \
            ("q.none", MsgType.SNAP, Status.NOT_FOUND, b"", None)
        stale = client.publish(b"v1", subject="q.old", type=MsgType.INITIAL, status=Status.STALE)
        client.publish(b"other", subject="q.other")  # later in the stream, another record
        found = client.snapshot("q.old", timeout=5)
        assert (found.type, found.status, found.data, found.record_seq) == (MsgType.INITIAL, Status.STALE, b"v1", stale)
        assert found.seq > stale  # the answer's own place in the stream is later than the record's
        relocated = client.publish(b"q.new", subject="q.old", type=MsgType.DROP, status=Status.RELOCATE)
        moved = client.snapshot("q.old", timeout=5)
        assert (moved.type, moved.status, moved.data, moved.record_seq) == \
            (MsgType.DROP, Status.RELOCATE, b"q.new", relocated)
        new = client.snapshot("q.new", timeout=5)
        assert (new.data, new.record_seq) == (b"v1", relocated)
        older = client.request("_SNAP.q.new", timeout=5)  # a requester that does not ask: the answer as it always was
        assert (older.data, older.envelope.headers, older.record_seq) == (b"v1", None, None)


def test_max_bytes_evicts_with_preempted_drops(backbone, tmp_path):
    with CacheProcess(backbone, tmp_path, "--max-bytes", "2000") as cache, Client(backbone.addr) as client:
        drops = client.subscribe("big.>")
        for index in range(4):
            client.publish(bytes(600), subject=f"big.{index}")
        evicted = take_until(drops, lambda m: m.type == MsgType.DROP, timeout=5)
        assert (evicted.subject, evicted.status) == ("big.0", Status.PREEMPTED)
        assert client.snapshot("big.0", timeout=5).status == Status.NOT_FOUND
        assert client.snapshot("big.3", timeout=5).status == Status.OK
    assert cache.summary()["preempted_sent"] >= 1


@pytest.mark.parametrize("args", [
    ["--max-bytes", "0"],
    ["--auth-db", "users.json"],
    ["--service", "quotes"],
    ["--session-interval", "-1"],
    ["--user", "a.b"],
])
def test_bad_arguments_give_one_line_and_nonzero_exit(args, backbone):
    result = run_cli("cache", "--backbone", backbone.address, *args, timeout=20)
    assert result.returncode != 0
    assert len(result.stderr.strip().splitlines()) == 1


def test_missing_auth_database_is_one_line(tmp_path, backbone):
    result = run_cli("cache", "--backbone", backbone.address, "--auth-db", str(tmp_path / "nope.json"),
                     "--service", "quotes", timeout=20)
    assert result.returncode == 1
    assert result.stderr.decode().strip().splitlines() == [f"fyrehose cache: error: no auth database at {tmp_path / 'nope.json'}"]


def test_help():
    result = run_cli("cache", "--help")
    assert result.returncode == 0 and b"--max-bytes" in result.stdout


def test_under_a_burst_snapshots_follow_the_stream_and_every_subject_ends_at_its_last_value(backbone, tmp_path):
    import orjson

    from fyrehose.subjects.envelope import Envelope

    updates, subjects = 60_000, 100
    envelopes = [Envelope(f"burst.{i % subjects}", orjson.dumps({"n": i, "f": i % 7})) for i in range(updates)]
    with CacheProcess(backbone, tmp_path) as cache, Client(backbone.addr, subscribe=False) as publisher, \
            Client(backbone.addr) as asker:
        seen = []
        for start in range(0, updates, 6000):
            publisher.publish_many(envelopes[start:start + 6000])  # confirmed: sequenced before the request below
            answer = asker.snapshot("burst.7", timeout=20, retry=20)
            seen.append((start + 6000, answer.status, orjson.loads(answer.data)["n"]))
        for published, status, n in seen:  # the answer reflects at least every update sequenced before it
            assert status == Status.OK and n % subjects == 7 and n >= published - subjects + 7
        last = {}
        for subject_index in range(subjects):
            answer = asker.snapshot(f"burst.{subject_index}", timeout=20, retry=20)
            last[subject_index] = (answer.status, orjson.loads(answer.data))
        assert last == {k: (Status.OK, {"n": updates - subjects + k, "f": (updates - subjects + k) % 7})
                        for k in range(subjects)}
    summary = cache.summary()
    assert summary["updates"] == updates and summary["snapshots"] == len(seen) + subjects
