"""Abuse protections, each with a test that fails when the protection is removed.

Spoofed addresses (no amplification) and the client table's capacity are also
covered by tests/backbone/test_backbone_core.py and tests/backbone/test_backbone_udp.py; FORWARD
pacing by tests/drivers/test_client.py::test_forwards_are_paced.  This file adds the
per-source rate limit, the REQUEST range cap, an amplification property over
random control datagrams, and the client capacity over UDP in both modes.
docs/security.md ("Threat model and abuse/fault tests") lists them all.
"""
from __future__ import annotations

import ipaddress
import os
import random
import socket
import time
from contextlib import ExitStack

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fyrehose.backbone.core import Backbone
from fyrehose.backbone.ratelimit import SourceRateLimiter
from fyrehose.protocol import codec

from support import LOOPBACK, run_cli

T0 = 1000.0
A = ("10.0.0.1", 5001)
B = ("10.0.0.2", 5002)
J = ("10.0.0.9", 5009)


def ka(bb: Backbone, source, now: float, flags: int = 0, addr: str = "0.0.0.0", port: int = 0) -> None:
    bb.receive(codec.encode(codec.Keepalive(addr, port, flags, bytes(16))), source, now)


# ---------------------------------------------------------------- the pure limiter


@settings(max_examples=200, deadline=None)
@given(rate=st.integers(1, 1000), gaps=st.lists(st.floats(0, 0.05, allow_nan=False), min_size=1, max_size=400))
def test_limiter_never_allows_more_than_burst_plus_rate_times_elapsed(rate, gaps):
    limiter = SourceRateLimiter(rate)
    now, allowed = T0, 0
    for gap in gaps:
        now += gap
        allowed += limiter.allow("10.0.0.1", now)
    assert allowed <= limiter.burst + rate * (now - T0) + 1e-6


def test_limiter_refills_and_keeps_sources_apart():
    limiter = SourceRateLimiter(10)
    assert sum(limiter.allow("10.0.0.1", T0) for _ in range(50)) == 10
    assert limiter.allow("10.0.0.2", T0)  # another source has its own bucket
    assert not limiter.allow("10.0.0.1", T0 + 0.05)
    assert limiter.allow("10.0.0.1", T0 + 0.1)  # one token back after 1/rate s


def test_limiter_memory_is_bounded_and_eviction_only_gives_a_full_bucket():
    limiter = SourceRateLimiter(5, capacity=100)
    for i in range(10_000):
        limiter.allow(str(ipaddress.IPv4Address(0x0A000000 + i)), T0)
    assert len(limiter) == 100
    assert sum(limiter.allow("10.0.0.0", T0) for _ in range(20)) == 5  # evicted: a fresh, full bucket


@pytest.mark.parametrize("rate, capacity", [(0, 10), (-1, 10), (5, 0)])
def test_limiter_refuses_bad_settings(rate, capacity):
    with pytest.raises(ValueError):
        SourceRateLimiter(rate, capacity)


# ---------------------------------------------------------------- the limiter in the core


def test_core_drops_and_counts_datagrams_over_a_sources_rate():
    bb = Backbone(rate_limit=10)
    ka(bb, B, T0)
    for i in range(100):
        bb.receive(codec.encode_push(b"flood %d" % i), A, T0)
    bb.receive(codec.encode_push(b"from B"), B, T0)
    assert bb.counters["pushes"] == 10 + 1
    assert bb.counters["drop:rate limited"] == 90
    bb.flush(T0)
    bb.receive(codec.encode_push(b"later"), A, T0 + 1.0)  # refilled
    assert bb.counters["pushes"] == 12


def test_core_without_a_rate_limit_takes_everything():
    bb = Backbone()
    for _ in range(1000):
        bb.receive(codec.encode_push(b"x"), A, T0)
    assert bb.counters["pushes"] == 1000 and bb.counters["drop:rate limited"] == 0


# ---------------------------------------------------------------- REQUEST range caps


def test_request_range_is_capped_at_max_request_range_and_the_last_issued_sequence():
    bb = Backbone(reserved=1_000_000, rng=random.Random(1))
    bb.receive(codec.encode_push(b"x"), A, T0)  # sequence 1_000_001 is the last issued
    ka(bb, J, T0)
    bb.flush(T0)
    bb.receive(codec.encode(codec.Request("0.0.0.0", 0, 1, 1_000_000)), A, T0)
    bb.receive(codec.encode(codec.Request("0.0.0.0", 0, 999_990, (1 << 48) - 1)), A, T0)
    forwards = [codec.decode(data)[0] for data, addr in bb.flush(T0).sends if addr == J]
    assert [(f.from_seq, f.to_seq) for f in forwards] == [(1, codec.MAX_REQUEST_SPAN), (999_990, 1_000_001)]
    bb.receive(codec.encode(codec.Request("0.0.0.0", 0, 1_000_002, 1_000_009)), A, T0)
    assert bb.flush(T0).sends == [] and bb.counters["drop:request beyond last sequence"] == 1


# ---------------------------------------------------------------- no amplification

CONTROL = st.one_of(
    st.builds(lambda a, p, f: codec.encode(codec.Keepalive(a, p, f, os.urandom(16))),
              st.integers(0, 0xFFFFFFFF).map(lambda n: str(ipaddress.IPv4Address(n))), st.integers(0, 65535),
              st.integers(0, 0xF)),
    st.builds(lambda a, p, lo, n: codec.encode(codec.Request(a, p, lo, lo + n)),
              st.integers(0, 0xFFFFFFFF).map(lambda n: str(ipaddress.IPv4Address(n))), st.integers(0, 65535),
              st.integers(1, 50), st.integers(0, 100_000)),
)


@settings(max_examples=300, deadline=None)
@given(datagrams=st.lists(CONTROL, min_size=1, max_size=20))
def test_spoofed_control_datagrams_never_make_the_backbone_send_to_a_third_party(datagrams):
    """An untrusted source gets answers only at its own address, and FORWARDs only ever name its own host."""
    bb = Backbone(rng=random.Random(0))
    ka(bb, J, T0)
    for i in range(40):
        bb.receive(codec.encode_push(b"m%d" % i), J, T0)
    bb.flush(T0)
    attacker = ("192.0.2.7", 4444)
    sent_in = 0
    for datagram in datagrams:
        bb.receive(datagram, attacker, T0)
        sent_in += len(datagram)
    out = bb.flush(T0).sends
    for data, addr in out:  # a host may name its own other ports, never another host
        assert addr == J or addr[0] == attacker[0]
        frame = codec.decode(bytes(data))[0]
        if isinstance(frame, codec.Forward):  # the journaling client re-DELIVERs to the attacker's own host
            assert frame.addr == attacker[0]
        else:
            assert addr == attacker and isinstance(frame, codec.KeepaliveAck)
    assert sum(len(data) for data, addr in out if addr[0] == attacker[0]) <= sent_in  # answers never outweigh asks


# ---------------------------------------------------------------- over UDP


def _recv_type(sock: socket.socket, kind: int, timeout: float = 2.0) -> bytes | None:
    deadline = time.monotonic() + timeout
    for _ in range(100_000):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return None
        sock.settimeout(remaining)
        try:
            data, _ = sock.recvfrom(65536)
        except TimeoutError:
            return None
        if data[0] == kind:
            return data
    return None


@pytest.mark.parametrize("workers", [0, 2], ids=lambda w: f"workers={w}")
def test_rate_limit_option_drops_a_flood_and_the_source_is_served_again_afterwards(backbone_factory, workers):
    backbone = backbone_factory(workers=workers, extra=["--rate-limit", "200"])
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as pub:
        pub.bind((LOOPBACK, 0))
        for i in range(3000):
            pub.sendto(codec.encode_push(b"flood %d" % i), backbone.addr)
        time.sleep(1.2)  # the bucket refills
        token = os.urandom(16)
        pub.sendto(codec.encode(codec.Keepalive(flags=codec.FLAG_HEAD | codec.FLAG_NOSUBSCRIBE, token=token)),
                   backbone.addr)
        ack = _recv_type(pub, codec.KEEPALIVE_ACK)
    assert ack is not None and ack[1:17] == token  # served again once its bucket refilled
    sequenced = int.from_bytes(ack[17:23], "big")  # the HEAD: the flood's PUSHes that were let through
    dropped = backbone.metric('fyrehose_dropped_total{reason="rate limited"}')
    # The burst went through and the rest was dropped and counted, each PUSH one or the other (the kernel
    # may drop some before the backbone reads them); how many the rate lets through over time is the
    # limiter's arithmetic, checked above on a manual clock.
    assert sequenced >= 1 and dropped >= 1
    assert sequenced + dropped <= 3000
    assert backbone.metric("fyrehose_pushes_total") == sequenced


def test_a_negative_rate_limit_is_refused_in_one_line():
    result = run_cli("backbone", "--workers", "2", "--rate-limit", "-5", "--listen", "127.0.0.1:0")
    assert result.returncode == 1
    assert result.stderr.decode().strip().count("\n") == 0 and "--rate-limit" in result.stderr.decode()


@pytest.mark.parametrize("workers", [0, 2], ids=lambda w: f"workers={w}")
def test_max_clients_refuses_the_third_client_and_still_serves_the_first_two(backbone_factory, workers):
    # 3: the start-up probe's KEEPALIVE (fyrehose.drivers.backbone_io.wait_for_backbone, from tests/support.py)
    # holds one slot for five seconds
    backbone = backbone_factory(workers=workers, extra=["--max-clients", "3"])
    with ExitStack() as stack:
        socks = []
        for _ in range(3):
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_DGRAM))
            sock.bind((LOOPBACK, 0))
            socks.append(sock)
        acks = []
        for sock in socks:
            token = os.urandom(16)
            sock.sendto(codec.encode(codec.Keepalive(flags=0, token=token)), backbone.addr)
            acks.append(_recv_type(sock, codec.KEEPALIVE_ACK, timeout=1.0))
        assert acks[0] is not None and acks[1] is not None
        assert acks[2] is None
        socks[0].sendto(codec.encode_push(b"to the two"), backbone.addr)
        for sock in socks[:2]:
            data = _recv_type(sock, codec.DELIVER)
            assert data is not None and codec.decode(data)[0].data == b"to the two"
        assert _recv_type(socks[2], codec.DELIVER, timeout=0.5) is None
