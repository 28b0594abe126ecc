"""The gateways' gevent link as a publisher only, holding what it published: FORWARDs answered from it, paced.

gevent runs here without monkey patching, exactly as in a gateway process;
a fresh backbone per test, so the holding link is its only journaling client
and every FORWARD of a REQUEST goes to it.
"""
from __future__ import annotations

import os
import threading
import time
from collections import Counter

import gevent
import pytest
from gevent import socket

import fyrehose.drivers.backbone_io
from fyrehose.drivers.link import BackboneLink
from fyrehose.net.sockets import enlarge_buffers
from fyrehose.protocol import codec
from fyrehose.protocol.forwarding import FORWARD_BURST, FORWARD_RATE
from fyrehose.protocol.recent_messages import RecentMessages
from fyrehose.subjects.session import SubjectSession

from support import EVENT_WITHIN, WatchedBucket


@pytest.fixture
def links(backbone_factory):
    """``links(**options)``: publishing-only links on one fresh backbone, each closed at the end."""
    backbone = backbone_factory()
    made: list[BackboneLink] = []

    def make(**options) -> BackboneLink:
        made.append(BackboneLink(backbone.address, SubjectSession(), None, stats=Counter(), **options))
        return made[-1]

    make.backbone = backbone
    yield make
    for link in made:
        link.close()


class Requester:
    """A subscriber's socket that misses nothing but asks for a range: REQUESTs out, re-DELIVERs in, with senders."""

    def __init__(self, backbone) -> None:
        self.backbone = backbone.addr
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        enlarge_buffers(self.sock, 8 << 20)  # a burst of answers waits here while this process's links run
        self.sock.bind(("127.0.0.1", 0))
        token = os.urandom(codec.TOKEN_SIZE)  # registered, but takes no stream and is no journaler itself
        self.sock.sendto(codec.encode(codec.Keepalive(flags=codec.FLAG_NOSUBSCRIBE | codec.FLAG_NOJOURNAL,
                                                      token=token)), self.backbone)
        ack, _ = self.sock.recvfrom(65536)  # the gevent socket: the links keep running meanwhile
        assert ack[0] == codec.KEEPALIVE_ACK

    def request(self, from_seq: int, to_seq: int) -> None:
        self.sock.sendto(codec.encode(codec.Request("0.0.0.0", 0, from_seq, to_seq)), self.backbone)

    def take(self, count: int, timeout: float = 10.0) -> list[tuple[tuple[str, int], int, bytes]]:
        """``count`` DELIVER frames as (sender, sequence, payload), in arrival order."""
        got: list[tuple[tuple[str, int], int, bytes]] = []
        deadline = time.monotonic() + timeout
        while len(got) < count:
            self.sock.settimeout(max(deadline - time.monotonic(), 0.001))
            try:
                data, source = self.sock.recvfrom(65536)
            except TimeoutError:
                break
            got.extend((source, frame.seq, frame.data) for frame in codec.decode(data)
                       if isinstance(frame, codec.Deliver))
        return got

    def pending(self) -> bool:
        """Whether anything is waiting on the socket now (the loop runs once first)."""
        gevent.sleep(0)
        self.sock.settimeout(0.001)
        try:
            self.sock.recvfrom(65536)
        except TimeoutError:
            return False
        return True

    def close(self) -> None:
        self.sock.close()


def wait_until(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what} did not happen within {timeout:g} s"
        gevent.sleep(0.01)


def test_a_publishing_link_takes_no_stream_and_journals_only_when_it_holds(links):
    holding = links(held=RecentMessages(1 << 20))
    plain = links()
    for link in (holding, plain):
        assert link.connection.flags & codec.FLAG_NOSUBSCRIBE and link.connection.tracker is None
    assert not holding.connection.flags & codec.FLAG_NOJOURNAL and holding.connection.serves_forwards
    assert holding.forward_rate == FORWARD_RATE  # the Client's default pace
    assert plain.connection.flags & codec.FLAG_NOJOURNAL and not plain.connection.serves_forwards
    with pytest.raises(ValueError, match="takes no stream"):
        BackboneLink(links.backbone.address, SubjectSession(), None, stats=Counter(), from_seq=1)


def test_a_forward_is_answered_from_what_the_link_held_and_nothing_else(links):
    threads = threading.active_count()
    held = RecentMessages(1 << 20)
    holding = links(held=held)
    other = links()  # NOJOURNAL: never FORWARDed to
    seqs = holding.publish([b"kept-%d" % n for n in range(3)])
    assert [held.get(seq) for seq in seqs] == [b"kept-%d" % n for n in range(3)]  # once CONFIRMed
    [elsewhere] = other.publish([b"published by another"])
    requester = Requester(links.backbone)
    try:
        requester.request(seqs[1], seqs[2])
        answers = requester.take(2)
        sender = ("127.0.0.1", holding.sock.getsockname()[1])
        assert answers == [(sender, seqs[1], b"kept-1"), (sender, seqs[2], b"kept-2")]
        requester.request(elsewhere, elsewhere)  # FORWARDed to the holding link, which does not hold it
        wait_until(lambda: holding.stats["forwards"] == 2, EVENT_WITHIN, "the second FORWARD")
        assert holding.stats["forwarded"] == 2
        assert not requester.pending()
    finally:
        requester.close()
    assert threading.active_count() == threads  # greenlets only


def test_answers_wait_for_the_bucket_after_a_burst(links, monkeypatch):
    """Every re-DELIVER waits for a token of the ``forward_rate`` bucket (its arithmetic: tests/protocol/test_pacing.py)."""
    WatchedBucket.made = []
    monkeypatch.setattr(fyrehose.drivers.backbone_io, "TokenBucket", WatchedBucket)  # forward_bucket makes it
    holding = links(held=RecentMessages(1 << 20), forward_rate=500)
    count = FORWARD_BURST + 100
    seqs = holding.publish([b"p%d" % n for n in range(count)])
    requester = Requester(links.backbone)
    try:
        requester.request(seqs[0], seqs[-1])
        answers = requester.take(count)
    finally:
        requester.close()
    assert [(seq, payload) for _, seq, payload in answers] == [(seq, b"p%d" % n) for n, seq in enumerate(seqs)]
    bucket = next(bucket for bucket in WatchedBucket.made if bucket.answers)
    assert (bucket.rate, bucket.burst) == (500, FORWARD_BURST)
    assert bucket.answers.count(0.0) == holding.stats["forwarded"] == count  # one token per re-DELIVER
    assert bucket.answers[:FORWARD_BURST] == [0.0] * FORWARD_BURST  # the burst at once...
    assert any(wait > 0 for wait in bucket.answers[FORWARD_BURST:])  # ...then it waited for tokens


class _ReadsWritten:
    """The link's receive socket with every read written down: ``read``, or ``empty`` for one that found nothing."""

    def __init__(self, sock, log: list) -> None:
        self.sock = sock
        self.log = log

    def recvfrom(self, size: int):
        try:
            received = self.sock.recvfrom(size)
        except BlockingIOError:
            self.log.append("empty")
            raise
        self.log.append("read")
        return received

    def __getattr__(self, name: str):
        return getattr(self.sock, name)


@pytest.mark.parametrize("subscribed", [True, False], ids=["subscribed", "publishing only"])
def test_the_datagram_that_brings_the_last_answer_ends_the_round(backbone_factory, subscribed):
    """A waiting client's publish: once its CONFIRM (and, subscribed, its own DELIVER) is in, the round reads no more
    (no read that finds the socket empty); whatever else is waiting is read in the loop's next iteration."""
    backbone = backbone_factory()
    log: list = []
    on_events = (lambda events: log.extend(("event", event.data) for event in events)) if subscribed else None
    link = BackboneLink(backbone.address, SubjectSession(), on_events, stats=Counter())
    try:
        loop = link._loop
        loop.sock = _ReadsWritten(loop.sock, log)
        rounds = loop.round

        def round_written() -> bool:
            log.append("round")
            return rounds()

        loop.round = round_written
        payloads = [b"waited-%d" % n for n in range(20)]
        answers = [("confirmed",), ("event",)] if subscribed else [("confirmed",)]
        for payload in payloads:
            link.submit_with([payload], lambda seqs, error, payload=payload: log.append(("confirmed", payload)))
            wait_until(lambda payload=payload: all(answer + (payload,) in log for answer in answers), EVENT_WITHIN,
                       f"{payload!r} answered")
        for payload in payloads:
            answered = max(log.index(answer + (payload,)) for answer in answers)
            after = next((entry for entry in log[answered + 1:] if entry in ("round", "read", "empty")), "round")
            assert after == "round", f"{payload!r}: the round read on after its last answer"
    finally:
        link.close()
