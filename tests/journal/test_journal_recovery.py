"""The journal end to end: real backbone and journal processes over loopback UDP.

- a subscriber behind a relay that drops 1% of its datagrams recovers every
  one of 100,000 messages, and only the journal can supply them (the
  subscriber sets NOJOURNAL and no other client journals);
- with several journals, a subscriber recovers from whichever is alive;
- a journal killed with SIGKILL again and again under load ends up, after its
  restarts, holding every confirmed message (backfilled from the other
  journal), and ``journal verify`` passes.
"""
from __future__ import annotations

import random
import threading
import time
from pathlib import Path

import pytest

from fyrehose import Client
from fyrehose.journal.gapindex import FILE_NAME as GAPS_FILE
from fyrehose.journal.gapindex import parse_gaps
from fyrehose.journal.reader import list_segments
from fyrehose.journal.report import records_in
from fyrehose.protocol.tracker import Message

from support import EVENT_WITHIN, LossyRelay, journaling, last_written, run_cli, wait_until


@pytest.fixture
def single_backbone(backbone_factory):
    """One backbone process: these tests are about the journal, not the backbone's modes."""
    return backbone_factory(workers=0)


def held(directory: Path, first: int, last: int) -> dict[int, bytes]:
    return {record.seq: record.data for record in records_in(directory, first, last)}


def recorded_lost(directory: Path) -> set[int]:
    gaps, _, _ = parse_gaps((directory / GAPS_FILE).read_bytes())
    return {seq for gap in gaps for seq in range(gap.from_seq, gap.to_seq + 1)}


def recover_through_the_journal_despite_one_percent_loss(backbone, journals, messages: int, *, batch: bool,
                                                        chunk: int, pause: float = 0.0) -> None:
    """Publish ``messages`` in ``publish_many`` calls of ``chunk`` (``pause`` s apart) to a subscriber behind a
    relay that drops every 100th datagram; it must get every one, in order, and only the journal could resend them.

    With ``batch`` the subscriber takes packed DELIVERs (a dropped datagram loses a whole batch); without, each
    message travels alone, so 1% of the messages are lost one by one.  The relay and the subscriber share the
    test's process and interpreter lock: the pause keeps the one-by-one stream at a rate they can take in.
    """
    journal = journals(backbone, "journal", "--no-parquet")
    relay = LossyRelay(backbone.addr, drop_every=100)
    try:
        with Client(backbone.addr, subscribe=False) as publisher:
            journaling(publisher, journal)
            with Client(relay.addr, journal=False, batch=batch) as lossy:
                stream = lossy.subscribe(on_loss="yield")
                payloads = [b"payload %06d" % i for i in range(messages)]
                seqs = []
                for start in range(0, messages, chunk):
                    seqs += publisher.publish_many(payloads[start:start + chunk])
                    time.sleep(pause)
                events = []
                deadline = time.monotonic() + 60 + messages / 2000
                while len(events) < messages and time.monotonic() < deadline:
                    event = stream.get(timeout=1.0)
                    if event is not None:
                        events.append(event)
                assert relay.dropped >= relay.passed // 100 * 0.9
                assert lossy.stats["requests"] > 0
                assert all(isinstance(e, Message) for e in events), [e for e in events if not isinstance(e, Message)][:3]
                assert [e.seq for e in events] == seqs
                assert [e.data for e in events] == payloads
        assert journal.stop() == 0
        assert journal.forwarded() >= relay.dropped  # only the journal could answer the REQUESTs
    finally:
        relay.close()


def test_a_batch_subscriber_with_one_percent_loss_recovers_100000_messages_through_the_journal(backbone, journals):
    recover_through_the_journal_despite_one_percent_loss(backbone, journals, 100_000, batch=True, chunk=100)


def test_one_percent_of_10000_messages_lost_one_by_one_are_recovered_through_the_journal(single_backbone, journals):
    recover_through_the_journal_despite_one_percent_loss(single_backbone, journals, 10_000, batch=False, chunk=1000,
                                                         pause=0.25)


@pytest.mark.slow
def test_one_percent_of_100000_messages_lost_one_by_one_are_recovered_through_the_journal(single_backbone, journals):
    recover_through_the_journal_despite_one_percent_loss(single_backbone, journals, 100_000, batch=False, chunk=1000,
                                                         pause=0.25)


def test_a_subscriber_recovers_from_whichever_journal_is_alive(single_backbone, journals):
    backbone = single_backbone
    first, second = journals(backbone, "first"), journals(backbone, "second")
    with Client(backbone.addr, subscribe=False) as publisher:
        start = journaling(publisher, first, second) + 1
        payloads = [b"kept %d" % i for i in range(3000)]
        seqs = publisher.publish_many(payloads)
        wait_until(lambda: all(last_written(j.directory) >= seqs[-1] for j in (first, second)), EVENT_WITHIN, "both journals")
        for dead, alive in ((first, second), (second, first)):
            dead.kill()  # the late subscriber and the publisher set NOJOURNAL: only `alive` can answer
            with Client(backbone.addr, journal=False) as late:
                stream = late.subscribe(from_seq=start, on_loss="yield")
                events = [stream.get(timeout=20) for _ in range(3000)]
            assert [(e.seq, e.data) for e in events] == list(zip(seqs, payloads)), f"recovering from {alive.directory.name}"
            dead.start()  # back for the next round: it resumes and backfills from the other
            wait_until(dead.running, EVENT_WITHIN, "the restarted journal")
        assert first.stop() == 0 and second.stop() == 0


def test_kill_minus_nine_in_a_loop_under_load_loses_nothing_confirmed(single_backbone, journals):
    backbone = single_backbone
    steady = journals(backbone, "steady")
    victim = journals(backbone, "victim")
    confirmed: list[int] = []
    stop = threading.Event()
    failures: list[BaseException] = []

    def publish() -> None:
        try:
            number = 0
            while not stop.is_set():
                batch = [b"load %d" % (number + i) for i in range(200)]
                confirmed.extend(publisher.publish_many(batch))
                number += 200
                time.sleep(0.01)
        except BaseException as exc:  # reported by the test thread
            failures.append(exc)

    with Client(backbone.addr, subscribe=False) as publisher, Client(backbone.addr) as keeper:
        keeper.subscribe()  # another client that holds recent messages, as a subscriber would
        first = journaling(publisher, steady, victim) + 1
        thread = threading.Thread(target=publish, daemon=True)
        thread.start()
        rng = random.Random(4)
        try:
            for _ in range(6):
                time.sleep(rng.uniform(0.4, 1.2))
                victim.kill()
                time.sleep(rng.uniform(0.0, 0.4))
                victim.start()
        finally:
            stop.set()
            thread.join(30)
        assert not failures, failures
        last = confirmed[-1]
        wait_until(lambda: last_written(victim.directory) >= last and last_written(steady.directory) >= last,
                   60, f"both journals reaching {last}")
    assert victim.stop() == 0 and steady.stop() == 0
    for journal in (victim, steady):
        result = run_cli("journal", "verify", str(journal.directory))
        assert result.returncode == 0, result.stdout.decode() + result.stderr.decode()
    victim_held = held(victim.directory, first, last)
    steady_held = held(steady.directory, first, last)
    for directory, mine, other in ((victim.directory, victim_held, steady_held),
                                   (steady.directory, steady_held, victim_held)):
        missing = [seq for seq in confirmed if seq not in mine]
        lost = recorded_lost(directory)
        # what one journal lacks it may only lack because nobody had it: then it is in its gap index
        assert all(seq in lost and seq not in other for seq in missing), (directory.name, missing[:10])
    assert len(victim_held) >= len(confirmed) * 0.99
    assert victim_held == {seq: data for seq, data in steady_held.items() if seq in victim_held}


def test_the_running_journal_exports_sealed_segments_and_applies_retention(single_backbone, journals):
    backbone = single_backbone
    import pyarrow.dataset as ds

    journal = journals(backbone, "journal", "--segment-size", "4KiB", "--retain", "12KiB")
    with Client(backbone.addr, subscribe=False) as publisher:
        first = journaling(publisher, journal) + 1
        payloads = [b"record %04d " % i + bytes(40) for i in range(600)]  # 600 records of 75 bytes: ~11 segments
        # windows of 40 keep each DELIVER datagram (a block, never split) under the segment size
        seqs = publisher.publish_many(payloads, window=40)
        wait_until(lambda: last_written(journal.directory) >= seqs[-1], EVENT_WITHIN, "the journal")

        def settled():
            segments, _ = list_segments(journal.directory)
            # retention runs after each export: at most 12 KiB plus what the active segment grew since
            size = sum(s.current_size() for s in segments)
            return size <= (12 << 10) + (4 << 10) and all(s.summary.exported for s in segments if s.summary)
        wait_until(settled, EVENT_WITHIN, "export and retention")
    assert journal.stop() == 0
    segments, _ = list_segments(journal.directory)
    assert len(segments) >= 3 and segments[0].first_seq > first  # the oldest went, the newest stayed
    assert "retention removed" in journal.log.read_text()
    result = run_cli("journal", "verify", str(journal.directory))
    assert result.returncode == 0, result.stdout.decode()
    # every sealed segment reached Parquet before retention let it go: the pipeline has all of them
    table = ds.dataset(journal.directory / "parquet", format="parquet", partitioning="hive").to_table()
    exported = sorted(table.column("seq").to_pylist())
    last_sealed = max(s.summary.last_seq for s in segments if s.summary)
    assert exported[0] < first  # from the journal's first record (a probe) on, with nothing missing
    assert exported == list(range(exported[0], last_sealed + 1))


def test_forwards_come_from_disk_and_skip_what_nobody_had(backbone_factory, journals):
    backbone = backbone_factory(workers=0, extra=["--recent-bytes", "0"])  # the backbone keeps no copy either
    journal = journals(backbone, "journal", "--forward-rate", "1000", "--give-up", "1", "--no-parquet")
    with Client(backbone.addr, subscribe=False) as publisher:
        start = journaling(publisher, journal) + 1
        before = publisher.publish_many([b"before %d" % i for i in range(1000)])
        wait_until(lambda: last_written(journal.directory) >= before[-1], EVENT_WITHIN, "the journal")
        assert journal.stop() == 0
        unheld = publisher.publish_many([b"unheld %d" % i for i in range(200)])  # no journal or subscriber holds these
        journal.start()  # resumes, REQUESTs the 200 from nobody, records them as lost after --give-up
        wait_until(journal.running, EVENT_WITHIN, "the restarted journal")
        after = publisher.publish_many([b"after %d" % i for i in range(300)])
        wait_until(lambda: last_written(journal.directory) >= after[-1], EVENT_WITHIN, "the journal")
    assert recorded_lost(journal.directory) == set(unheld)
    with Client(backbone.addr, journal=False, give_up_after=3) as late:
        stream = late.subscribe(from_seq=start, on_loss="yield")
        events = [stream.get(timeout=20) for _ in range(1000 + 1 + 300)]  # the first 1000 re-DELIVERed from disk
    got = [(e.seq, e.data) for e in events if isinstance(e, Message)]
    assert got == [(s, b"before %d" % i) for i, s in enumerate(before)] + [(s, b"after %d" % i) for i, s in enumerate(after)]
    lost = [e for e in events if not isinstance(e, Message)]
    assert [(e.from_seq, e.to_seq) for e in lost] == [(unheld[0], unheld[-1])]
    # the journal answers through its Client, paced at --forward-rate: tests/drivers/test_client.py::test_forwards_are_paced
    assert journal.stop() == 0
    assert journal.forwarded() >= 1300
