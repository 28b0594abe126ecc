"""The blocking Client against a real backbone over loopback UDP."""
from __future__ import annotations

import socket
import subprocess
import sys
import textwrap
import time

import pytest
from conftest import BACKBONE_MODES

import fyrehose.drivers.backbone_io
from fyrehose import BackboneUnreachable, Client, MessagesLost, PayloadTooLarge
from fyrehose.protocol import codec
from fyrehose.protocol.tracker import Lost, Message

from support import EVENT_WITHIN, WatchedBucket, free_port, take, wait_until


def test_publish_returns_sequence_and_subscribers_get_each_message_once_in_order(backbone):
    with Client(backbone.addr) as sub_a, Client(backbone.addr) as sub_b, Client(backbone.addr, subscribe=False) as pub:
        stream_a, stream_b = sub_a.subscribe(), sub_b.subscribe()
        seqs = [pub.publish(b"message %d" % i) for i in range(50)]
        assert seqs == list(range(seqs[0], seqs[0] + 50))
        for stream in (stream_a, stream_b):
            events = take(stream, 50)
            assert [(e.seq, e.data) for e in events] == [(s, b"message %d" % i) for i, s in enumerate(seqs)]
            assert stream.get(timeout=0.3) is None  # nothing twice


def test_publish_many_packs_and_returns_consecutive_sequences(backbone):
    with Client(backbone.addr) as sub, Client(backbone.addr, subscribe=False) as pub:
        stream = sub.subscribe()
        payloads = [b"x" * (i % 200) for i in range(5000)]
        seqs = pub.publish_many(payloads)
        assert seqs == list(range(seqs[0], seqs[0] + 5000))
        assert pub.stats["push datagrams"] < 100  # packed, not one datagram per message
        events = take(stream, 5000)
        assert [e.data for e in events] == payloads


def test_publish_nowait_sends_packed_unconfirmed_pushes(backbone):
    with Client(backbone.addr) as sub, Client(backbone.addr, subscribe=False) as pub:
        stream = sub.subscribe()
        for i in range(300):
            pub.publish_nowait(b"n%d" % i)
        pub.flush()
        events = take(stream, 300)
        assert [e.data for e in events] == [b"n%d" % i for i in range(300)]


def test_largest_payload_round_trips_and_one_byte_more_is_refused(backbone):
    with Client(backbone.addr) as client:
        stream = client.subscribe()
        big = bytes(range(256)) * (codec.MAX_PAYLOAD // 256) + b"z" * (codec.MAX_PAYLOAD % 256)
        assert len(big) == 65498
        seq = client.publish(big)
        (event,) = take(stream, 1)
        assert (event.seq, event.data) == (seq, big)
        with pytest.raises(PayloadTooLarge):
            client.publish(big + b"!")
        with pytest.raises(PayloadTooLarge):
            client.publish_nowait(big + b"!")


def test_no_backbone_is_a_clear_error():
    port = free_port()
    with pytest.raises(BackboneUnreachable, match=f"no KEEPALIVE-ACK from 127.0.0.1:{port} within 0.5 s"):
        Client(("127.0.0.1", port), unreachable_after=0.5)


@pytest.mark.parametrize("option, message", [
    ({"keepalive_interval": 1.5}, r"keepalive_interval must be in \(0, 1\] seconds \(docs/protocol.md, client rule 1\)"),
    ({"confirm_retry": 0}, "confirm_retry must be more than 0"),
    ({"give_up_after": -1.0}, "give_up_after must be more than 0"),
    ({"request_delay": -0.5}, "request_delay must be 0 or more seconds"),
])
def test_options_outside_the_rules_are_refused_before_anything_is_opened(option, message):
    with pytest.raises(ValueError, match=message):
        Client(("127.0.0.1", free_port()), **option)


def test_publish_fails_clearly_when_the_backbone_goes_away(backbone):
    with Client(backbone.addr, subscribe=False, unreachable_after=1.0) as pub:
        pub.publish(b"before")
        backbone.kill()
        time.sleep(1.2)
        with pytest.raises(BackboneUnreachable):
            pub.publish(b"after", timeout=2.0)


def test_late_subscriber_backfills_from_another_clients_journal(backbone):
    with Client(backbone.addr) as keeper, Client(backbone.addr, subscribe=False) as pub:
        keeper.subscribe()
        seqs = pub.publish_many([b"old %d" % i for i in range(500)])
        wait_until(lambda: len(keeper.held) >= 500, what="the keeper holding the 500 messages")
        with Client(backbone.addr) as late:
            stream = late.subscribe(from_seq=seqs[0])
            events = take(stream, 500)
        assert [(e.seq, e.data) for e in events] == [(s, b"old %d" % i) for i, s in enumerate(seqs)]
        assert keeper.stats["forwarded"] >= 500


@pytest.fixture(params=BACKBONE_MODES, ids=lambda workers: f"workers={workers}")
def forgetful_backbone(request, backbone_factory):
    """A backbone that keeps no recent log to re-deliver from: with no journaling client, a hole is for good."""
    return backbone_factory(workers=request.param, extra=["--recent-bytes", "0"])


def asked_and_nobody_answered(late: Client, backbone) -> None:
    """``late`` REQUESTed its hole (learnt from the HEAD, asked for after the head delay, then retried) and
    nothing came back: no DELIVER reached it, no FORWARD went out, the backbone re-delivered nothing."""
    assert late.stats["requests"] >= 2, late.stats
    assert late.stats["delivered frames"] == 0, late.stats
    metrics = backbone.metrics()
    assert metrics["fyrehose_requests_total"] >= late.stats["requests"] - 1  # one may still be in flight
    assert metrics['fyrehose_dropped_total{reason="no journaling client"}'] >= 1
    assert metrics["fyrehose_forwards_total"] == 0 and metrics["fyrehose_redelivered_total"] == 0


def test_unrecoverable_messages_are_surfaced_never_skipped(forgetful_backbone):
    backbone = forgetful_backbone
    with Client(backbone.addr, journal=False) as nobody_keeps, Client(backbone.addr, subscribe=False) as pub:
        nobody_keeps.subscribe()
        first = pub.publish_many([b"a", b"b", b"c"])[0]
        with Client(backbone.addr, give_up_after=2.0) as late:  # past the hole's first REQUEST and retries
            stream = late.subscribe(from_seq=first)
            with pytest.raises(MessagesLost) as lost:
                stream.get(timeout=EVENT_WITHIN)
            assert (lost.value.lost.from_seq, lost.value.lost.to_seq) == (first, first + 2)
            asked_and_nobody_answered(late, backbone)
            seq = pub.publish(b"d")  # the stream goes on after the loss
            event = stream.get(timeout=EVENT_WITHIN)
            assert (event.seq, event.data) == (seq, b"d")


def test_loss_can_be_yielded_as_an_event(forgetful_backbone):
    backbone = forgetful_backbone
    with Client(backbone.addr, subscribe=False) as pub:
        first = pub.publish(b"gone")
        with Client(backbone.addr, give_up_after=2.0) as late:
            stream = late.subscribe(from_seq=first, on_loss="yield")
            event = stream.get(timeout=EVENT_WITHIN)
            assert event == Lost(first, first, "not recovered")
            asked_and_nobody_answered(late, backbone)


def test_nojournal_client_is_never_asked_to_forward(backbone):
    with Client(backbone.addr, journal=False) as quiet, Client(backbone.addr, subscribe=False) as pub:
        quiet.subscribe()
        first = pub.publish(b"x")
        time.sleep(0.2)
        with Client(backbone.addr, give_up_after=1.0) as late:
            stream = late.subscribe(from_seq=first, on_loss="yield")
            event = stream.get(timeout=EVENT_WITHIN)  # no journaling client: the backbone re-delivers from its recent log
            assert isinstance(event, Message) and (event.seq, event.data) == (first, b"x")
            assert late.stats["requests"] >= 1  # it asked: the backbone could have chosen a journaler
        assert quiet.stats["forwards ignored"] == 0  # the backbone never chose it


def test_duplicate_delivers_are_discarded(backbone):
    with Client(backbone.addr) as sub, Client(backbone.addr, subscribe=False) as pub:
        stream = sub.subscribe()
        seq = pub.publish(b"once")
        assert take(stream, 1)[0].seq == seq
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as peer:
            for _ in range(5):
                peer.sendto(codec.encode_deliver(seq, b"once"), ("127.0.0.1", sub.address[1]))
        seq2 = pub.publish(b"next")
        (event,) = take(stream, 1)  # the forged copies reached the socket first: one that passed would come first
        assert event.seq == seq2
        assert sub.stats["DELIVERs from strangers"] == 5  # not a requested hole: never reaches the tracker


def test_forwards_are_paced(backbone, monkeypatch):
    """Every re-DELIVER waits for a token of the ``forward_rate`` bucket (its arithmetic: tests/protocol/test_pacing.py)."""
    WatchedBucket.made = []
    monkeypatch.setattr(fyrehose.drivers.backbone_io, "TokenBucket", WatchedBucket)  # forward_bucket makes it
    with Client(backbone.addr, forward_rate=500) as keeper, Client(backbone.addr, subscribe=False) as pub:
        keeper.subscribe()
        seqs = pub.publish_many([b"p%d" % i for i in range(1000)])
        with Client(backbone.addr) as late:
            stream = late.subscribe(from_seq=seqs[0])
            events = take(stream, 1000)
        assert [e.seq for e in events] == seqs
    forwarded = keeper.stats["forwarded"]  # the keeper is closed: its forwarder has stopped
    buckets = [bucket for bucket in WatchedBucket.made if bucket.answers]
    assert len(buckets) == 1 and (buckets[0].rate, buckets[0].burst) == (500, 256)
    answers = buckets[0].answers
    assert answers.count(0.0) == forwarded > 256  # one token per re-DELIVER
    assert answers[:256] == [0.0] * 256  # the burst at once...
    assert any(wait > 0 for wait in answers[256:])  # ...then it waited for tokens (744 more at 500/s)


def test_close_stops_deliveries_at_once(backbone):
    sub = Client(backbone.addr)
    sub.subscribe()
    sub.close()
    with Client(backbone.addr, subscribe=False) as pub:
        pub.publish(b"x")
    wait_until(lambda: backbone.metrics()['fyrehose_subscribers{batch="yes"}'] == 0, what="the goodbye counted")


def test_iteration_ends_when_the_client_closes(backbone):
    client = Client(backbone.addr)
    stream = client.subscribe()
    client.close()
    assert list(stream) == []


def test_keepalive_runs_as_a_greenlet_under_gevent(backbone, tmp_path):
    script = tmp_path / "gevent_client.py"
    script.write_text(textwrap.dedent(f"""
        from gevent import monkey; monkey.patch_all()
        import gevent, threading
        from fyrehose import Client
        with Client(("127.0.0.1", {backbone.port})) as sub, Client(("127.0.0.1", {backbone.port}), subscribe=False) as pub:
            stream = sub.subscribe()
            assert "gevent" in type(threading.current_thread()).__module__ or monkey.is_module_patched("threading")
            gevent.sleep(6.0)   # longer than the backbone's 5 s lifetime: keepalives must have run
            seq = pub.publish(b"still here")
            event = stream.get(timeout=5)
            assert event is not None and event.seq == seq, event
        print("ok")
    """))
    result = subprocess.run([sys.executable, str(script)], capture_output=True, timeout=60)
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    assert result.stdout.strip() == b"ok"


def test_a_reader_that_falls_behind_gets_an_explicit_overrun_not_unbounded_memory(backbone):
    with Client(backbone.addr) as sub, Client(backbone.addr, subscribe=False) as pub:
        stream = sub.subscribe(on_loss="yield", max_queued_bytes=1000)
        seqs = pub.publish_many([b"x" * 100 for _ in range(30)])
        # everything has arrived before the reader starts; the queue holds at most 1000 bytes of it
        wait_until(lambda: sub.stats["delivered frames"] >= len(seqs), what="the 30 messages received")
        events = take(stream, 11)
        assert [e.seq for e in events[:10]] == seqs[:10]
        assert events[10] == Lost(seqs[10], seqs[-1], "subscriber overrun")  # reported once caught up
        tail = pub.publish(b"after")
        assert stream.get(timeout=EVENT_WITHIN).seq == tail
