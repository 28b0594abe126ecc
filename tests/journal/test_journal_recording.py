"""The journal's recording path and FORWARD service against a real backbone, its metrics, its lag reports,
and forged input on its socket."""
from __future__ import annotations

import socket
import time
import urllib.request
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fyrehose import Client
from fyrehose.journal.lag import Lag, LagClock, LagWarning
from fyrehose.journal.report import records_in
from fyrehose.journal.segment import decode_blocks
from fyrehose.loadtest.prometheus import parse_samples
from fyrehose.protocol import codec
from fyrehose.protocol.pacing import TokenBucket
from fyrehose.protocol.tracker import Message
from fyrehose.runtime.readiness import READY_LINE, free_port

from support import EVENT_WITHIN, LossyRelay, journaling, last_written, wait_until


def recover_ten_percent_through_the_journal_only(backbone_factory, journals, messages: int) -> None:
    """A batch subscriber behind a relay that drops every 10th DELIVER datagram (re-deliveries included) gets
    every message in order; the backbone keeps no recent log, so only the journal can answer."""
    backbone = backbone_factory(workers=0, extra=["--recent-bytes", "0"])
    journal = journals(backbone, "journal", "--no-parquet")
    relay = LossyRelay(backbone.addr, drop_every=10)
    try:
        with Client(backbone.addr, subscribe=False) as publisher:
            journaling(publisher, journal)
            with Client(relay.addr, journal=False, give_up_after=60) as lossy:
                stream = lossy.subscribe(on_loss="yield", max_queued=messages + 10)
                payloads = [b"ten percent %08d" % i for i in range(messages)]
                seqs = []
                for start in range(0, messages, 20_000):
                    seqs += publisher.publish_many(payloads[start:start + 20_000])
                events = []
                deadline = time.monotonic() + 120 + messages / 5000
                while len(events) < messages and time.monotonic() < deadline:
                    event = stream.get(timeout=1.0)
                    if event is not None:
                        events.append(event)
                assert relay.dropped >= 10 and lossy.stats["requests"] > 0
                assert all(isinstance(e, Message) for e in events), [e for e in events if not isinstance(e, Message)][:3]
                assert [e.seq for e in events] == seqs
                assert [e.data for e in events] == payloads
        assert journal.stop() == 0
        assert journal.forwarded() >= relay.dropped  # every dropped datagram held at least one message
    finally:
        relay.close()


def test_a_subscriber_that_lost_ten_percent_recovers_through_a_journal_only(backbone_factory, journals):
    recover_ten_percent_through_the_journal_only(backbone_factory, journals, 200_000)


@pytest.mark.slow
def test_a_subscriber_that_lost_ten_percent_of_a_million_recovers_through_a_journal_only(backbone_factory, journals):
    recover_ten_percent_through_the_journal_only(backbone_factory, journals, 1_000_000)


def scrape(address: str) -> dict[str, float]:
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=5) as response:
        return parse_samples(response.read().decode())


def test_metrics_show_lag_writes_fsyncs_and_losses(backbone_factory, journals):
    backbone = backbone_factory(workers=0)
    address = f"127.0.0.1:{free_port()}"
    journal = journals(backbone, "journal", "--no-parquet", "--metrics", address, "--fsync", "always")
    with Client(backbone.addr, subscribe=False) as publisher:
        journaling(publisher, journal)
        last = publisher.publish_many([b"m%d" % i for i in range(20_000)])[-1]
    wait_until(lambda: last_written(journal.directory) >= last, EVENT_WITHIN, "the journal")
    values = wait_until(lambda: (v := scrape(address))["fyrehose_journal_lag_messages"] == 0
                        and v["fyrehose_journal_head"] >= last and v, EVENT_WITHIN, "a lag of nothing")
    assert values["fyrehose_journal_written_total"] >= 20_000
    assert values["fyrehose_journal_written_datagrams_total"] < values["fyrehose_journal_written_total"]
    assert values["fyrehose_journal_lag_seconds"] == 0
    assert values["fyrehose_journal_fsyncs_total"] >= 1
    assert values["fyrehose_journal_fsync_seconds_total"] >= values["fyrehose_journal_fsync_seconds_max"] > 0
    assert values["fyrehose_journal_lost_total"] == 0
    assert "fyrehose_journal_write_rate" in values and "fyrehose_journal_forwarded_total" in values
    assert journal.stop() == 0


def test_forged_and_malformed_datagrams_on_the_journal_socket_are_dropped(backbone_factory, journals):
    backbone = backbone_factory(workers=0)
    journal = journals(backbone, "journal", "--no-parquet")
    wait_until(journal.running, EVENT_WITHIN, f"the journal (log {journal.log})")
    host, port = READY_LINE.search(journal.log.read_text()).group("host", "port")
    with Client(backbone.addr, subscribe=False) as publisher:
        first = journaling(publisher, journal)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as stranger:
            forged = [codec.encode_deliver(first + 1, b"forged"), codec.encode_deliver(first + 2, b"forged") * 3,
                      b"", b"\x01", b"\x01\xff\xff" + bytes(6), bytes(range(256)),
                      codec.encode(codec.Forward("127.0.0.1", 9, 1, 10))]
            for datagram in forged * 20:
                stranger.sendto(datagram, (host, int(port)))
        seqs = publisher.publish_many([b"real %d" % i for i in range(100)])
    wait_until(lambda: last_written(journal.directory) >= seqs[-1], EVENT_WITHIN, "the journal")
    assert journal.alive()
    held = {record.seq: record.data for record in records_in(journal.directory, first + 1, seqs[-1])}
    assert held == {seq: b"real %d" % i for i, seq in enumerate(seqs)}
    assert journal.stop() == 0


# ---------------------------------------------------------------- pure parts


def test_lag_is_messages_behind_the_head_and_the_age_of_the_oldest_unwritten_announcement():
    clock = LagClock()
    clock.saw_head(100, now=10.0)
    clock.saw_head(150, now=11.0)
    clock.saw_head(120, now=11.5)  # an older head learnt late changes nothing
    assert clock.lag(90, now=12.0) == Lag(60, 2.0)  # 91 was known to exist at 10.0
    assert clock.lag(120, now=12.0) == Lag(30, 1.0)  # 121 only at 11.0
    assert clock.lag(149, now=13.0) == Lag(1, 2.0)
    assert clock.lag(150, now=13.0) == Lag(0, 0.0)


def test_the_lag_warning_is_said_once_and_the_catching_up_once():
    warning = LagWarning(1.0)
    said = [warning.update(lag) for lag in [Lag(10, 0.5), Lag(900, 1.5), Lag(2000, 3.0), Lag(5, 0.2),
                                            Lag(0, 0.0), Lag(0, 0.0), Lag(50, 2.0), Lag(700, 0.05)]]
    assert [s is not None for s in said] == [False, True, False, False, True, False, True, True]
    assert "falling behind" in said[1] and "caught up" in said[4] and "caught up" in said[7]


def test_a_datagram_of_many_frames_takes_as_many_tokens():
    bucket = TokenBucket(rate=1000, burst=100, now=0.0)
    assert bucket.take(100, 0.0) == 0.0  # a full bucket sends a datagram of 100 frames at once
    assert bucket.take(50, 0.0) == pytest.approx(0.05)  # the next 50 wait for 50 tokens
    assert bucket.take(50, 0.05) == 0.0
    assert bucket.take(300, 0.05) == pytest.approx(0.1)  # more than a burst waits for a full bucket
    assert bucket.take(300, 0.16) == 0.0  # and then leaves it in debt: the long-run rate holds
    assert bucket.take(1, 0.16) == pytest.approx(0.201)


@given(st.binary(max_size=400))
def test_any_bytes_decode_to_intact_blocks_or_a_reason_never_an_exception(raw):
    scan = decode_blocks(raw)
    assert scan.end <= len(raw)
    assert scan.stop is not None or scan.end == len(raw)


def test_lag_in_seconds_is_also_the_messages_behind_at_the_rate_the_head_rises():
    clock = LagClock()
    for second in range(4):
        clock.saw_head(1000 * (second + 1), now=float(second))  # the backbone issues 1000/s
    assert clock.rate(3.0) == 1000.0
    assert clock.lag(1000, now=3.0) == Lag(3000, 3.0)  # 3000 behind at 1000/s, also 2001 first seen at 1.0
    assert clock.lag(3990, now=3.0).seconds == pytest.approx(0.01)  # fresh samples alone would say 0


def test_the_running_journal_says_it_on_stderr_once_each_way():
    import io

    from fyrehose.journal.service import JournalService

    log = io.StringIO()
    service = JournalService(None, ("127.0.0.1", 2323), start_seq=None, log=log, lag_warning=1.0)  # type: ignore[arg-type]
    for lag in (Lag(10, 0.2), Lag(90_000, 2.5), Lag(180_000, 4.0), Lag(0, 0.0), Lag(0, 0.0)):
        service._lag(lag)
    assert log.getvalue().splitlines() == [
        "fyrehose journal: falling behind the backbone: 90000 messages, 2.5 s (more than 1 s)",
        "fyrehose journal: caught up with the backbone"]


def test_kill_minus_nine_while_recording_keeps_everything_the_metrics_reported_written(backbone_factory, journals):
    import threading

    from fyrehose.journal.store import JournalStore

    backbone = backbone_factory(workers=0)
    address = f"127.0.0.1:{free_port()}"
    journal = journals(backbone, "journal", "--no-parquet", "--metrics", address)
    with Client(backbone.addr, subscribe=False) as publisher:
        first = journaling(publisher, journal)
        done = threading.Event()

        def publish():
            payloads = [b"burst %d" % i for i in range(2048)]
            while not done.is_set():
                publisher.publish_many(payloads)

        thread = threading.Thread(target=publish, daemon=True)
        thread.start()
        try:
            reported = wait_until(lambda: (n := scrape(address)["fyrehose_journal_written_total"]) > 50_000 and n,
                                  EVENT_WITHIN, "50000 messages written")
            journal.kill()  # kill -9 right after the figure was read
        finally:
            done.set()
            thread.join(30)
    store = JournalStore(journal.directory)
    store.open()
    try:
        held = sum(1 for _ in store.held(1, store.last_seq))
        assert store.last_seq >= first
    finally:
        store.close()
    assert held >= reported


class RecordingSocket:
    def __init__(self):
        self.sent = []

    def sendto(self, data, target):
        self.sent.append((target, data))


def test_forwards_are_answered_with_stored_datagrams_cut_to_the_range_requesters_served_in_turn(tmp_path):
    import threading

    from fyrehose.journal.forwarder import Forwarder, burst_for
    from fyrehose.journal.store import JournalStore
    from fyrehose.protocol.frame_run import FrameRun

    store = JournalStore(tmp_path)
    store.open()
    for first in range(1, 5001, 50):
        frames = b"".join(codec.encode_deliver(seq, b"%08d" % seq) for seq in range(first, first + 50))
        store.write([FrameRun(first, 50, len(frames) // 50, frames)])
    sock, done, stop = RecordingSocket(), [], threading.Event()
    forwarder = Forwarder(sock, store.held_frames, done.append, rate=50_000, stats=Counter())
    wide, narrow = codec.Forward("127.0.0.1", 1001, 1, 5000), codec.Forward("127.0.0.1", 1002, 4210, 4230)
    forwarder.offer(wide)
    forwarder.offer(narrow)
    thread = threading.Thread(target=forwarder.run, args=(stop,))
    thread.start()
    try:
        wait_until(lambda: len(done) == 2, EVENT_WITHIN, "both FORWARDs answered")
    finally:
        stop.set()
        thread.join(5)
        store.close()
    assert done == [narrow, wide]  # the narrow one did not wait for the wide one
    by_target = {}
    for target, data in sock.sent:
        spans, error = codec.scan(data, codec.DELIVER)
        assert error is None and len(data) <= codec.MAX_DATAGRAM
        assert len(spans) <= burst_for(50_000)  # joined datagrams are cut to the requester's burst
        by_target.setdefault(target[1], []).extend(seq for _, _, seq in spans)
    assert by_target == {1001: list(range(1, 5001)), 1002: list(range(4210, 4231))}
    assert forwarder.stats["forwarded"] == 5000 + 21
    assert max(len(codec.scan(data, codec.DELIVER)[0]) for _, data in sock.sent) == burst_for(50_000) == 1024
    assert burst_for(1000) == 50 and burst_for(10) == 16 and burst_for(10_000_000) == 1024


def test_a_forward_for_what_the_writer_has_not_stored_yet_waits_for_it_instead_of_going_unanswered(tmp_path):
    """The requester noticed the hole as the journal received the datagram; the writer stores it a moment later.
    The FORWARD is answered with it then, not at once with nothing (which would leave the requester to retry)."""
    import threading

    from fyrehose.journal.forwarder import Forwarder
    from fyrehose.journal.store import JournalStore
    from fyrehose.protocol.frame_run import FrameRun

    store = JournalStore(tmp_path)
    store.open()
    known = 200  # what the journal has received: stored only once the test says so
    sock, done, stop = RecordingSocket(), [], threading.Event()
    forwarder = Forwarder(sock, store.held_frames, done.append, rate=1_000_000, stats=Counter(),
                          unwritten=lambda seq: store.written_through < seq <= known)
    thread = threading.Thread(target=forwarder.run, args=(stop,))
    thread.start()
    try:
        forwarder.offer(codec.Forward("127.0.0.1", 1001, 101, 200))
        wait_until(lambda: forwarder._requesters, EVENT_WITHIN, "the FORWARD taken in")
        time.sleep(0.05)
        assert done == [] and sock.sent == []  # waiting for the writer, not answered with nothing
        frames = b"".join(codec.encode_deliver(seq, b"%08d" % seq) for seq in range(1, 201))
        store.write([FrameRun(1, 200, len(frames) // 200, frames)])
        wait_until(lambda: done, EVENT_WITHIN, "the FORWARD answered")
        forwarder.offer(codec.Forward("127.0.0.1", 1002, 150, 300))  # 201.. will never come: no waiting for it
        wait_until(lambda: len(done) == 2, EVENT_WITHIN, "the second FORWARD answered")
    finally:
        stop.set()
        thread.join(5)
        store.close()
    sent = {port: [seq for data in (d for (_, p), d in sock.sent if p == port)
                   for _, _, seq in codec.scan(data, codec.DELIVER)[0]] for port in (1001, 1002)}
    assert sent == {1001: list(range(101, 201)), 1002: list(range(150, 201))}


def test_a_metrics_address_in_use_is_one_line(backbone_factory, tmp_path):
    from support import run_cli

    backbone = backbone_factory(workers=0)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_cli("journal", "--dir", str(tmp_path / "j"), "--backbone", backbone.address, "--no-parquet",
                         "--metrics", f"127.0.0.1:{port}", timeout=60)
    lines = result.stderr.decode().strip().splitlines()
    assert result.returncode != 0 and lines[-1] == f"fyrehose journal: error: --metrics 127.0.0.1:{port}: Address already in use"
    assert "Traceback" not in result.stderr.decode()
