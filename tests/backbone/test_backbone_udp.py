"""The backbone rules and extensions of docs/protocol.md, checked over real loopback UDP.

Every test talks to a running ``fyrehose backbone`` subprocess (the ``backbone``
fixture) with raw sockets; frames are built and parsed here with ``struct``
straight from the layouts of docs/protocol.md, so the backbone is checked against the spec and
not against the project's own codec.  Each test breaks if its rule is broken.

Traffic goes to 127.0.0.1 only; 127.0.0.2 appears solely as an address *named*
inside KEEPALIVE/REQUEST frames (the "foreign address" case).
"""
from __future__ import annotations

import os
import selectors
import socket
import struct
import time
from contextlib import ExitStack

LOOPBACK = "127.0.0.1"
FOREIGN = "127.0.0.2"  # only ever named inside packets, never sent to

DELIVER, PUSH, REQUEST, FORWARD, KEEPALIVE, KEEPALIVE_ACK, CONFIRM = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20, 0x40
NOSUBSCRIBE, NOJOURNAL, BATCH, HEAD = 0x1, 0x2, 0x4, 0x8
MAX_DATAGRAM = 65507
MAX_PAYLOAD = 65498

HEADER = struct.Struct(">BHHI")  # type, LENGTH, 48-bit sequence/tag as 16 + 32 bits
RANGE = struct.Struct(">B4sHHIHI")  # REQUEST / FORWARD
KEEPALIVE_FRAME = struct.Struct(">B4sHHI16s")
CONFIRM_FRAME = struct.Struct(">BHIHI")
U48 = struct.Struct(">HI")

MALFORMED = 'fyrehose_dropped_total{reason="malformed"}'
FOREIGN_ADDRESS = 'fyrehose_dropped_total{reason="foreign address"}'
UNEXPECTED_TYPE = 'fyrehose_dropped_total{reason="unexpected type"}'
PUSHES = "fyrehose_pushes_total"


# ---------------------------------------------------------------- frames (from the layouts in docs/protocol.md)


def u48(value: int) -> tuple[int, int]:
    return value >> 32, value & 0xFFFFFFFF


def push_frame(data: bytes, tag: int = 0) -> bytes:
    return HEADER.pack(PUSH, len(data), *u48(tag)) + data


def keepalive_frame(flags: int = 0, token: bytes = bytes(16), addr: str = "0.0.0.0", port: int = 0) -> bytes:
    return KEEPALIVE_FRAME.pack(KEEPALIVE, socket.inet_aton(addr), port, *u48(flags), token)


def request_frame(lo: int, hi: int, addr: str = "0.0.0.0", port: int = 0) -> bytes:
    return RANGE.pack(REQUEST, socket.inet_aton(addr), port, *u48(lo), *u48(hi))


def parse_delivers(datagram: bytes) -> list[tuple[int, bytes]]:
    """Every DELIVER frame of a datagram as (sequence, data); fails on anything else."""
    frames = []
    offset = 0
    while offset < len(datagram):
        assert len(datagram) - offset >= 9, f"truncated DELIVER header in {datagram[:40]!r}"
        kind, length, high, low = HEADER.unpack_from(datagram, offset)
        assert kind == DELIVER, f"frame type 0x{kind:02x} where a DELIVER was expected"
        end = offset + 9 + length
        assert end <= len(datagram), "DELIVER LENGTH runs past the datagram"
        frames.append(((high << 32) | low, datagram[offset + 9:end]))
        offset = end
    return frames


def parse_range(datagram: bytes) -> tuple[int, str, int, int, int]:
    assert len(datagram) == 19, f"REQUEST/FORWARD must be 19 bytes, got {len(datagram)}"
    kind, addr, port, fh, fl, th, tl = RANGE.unpack(datagram)
    return kind, socket.inet_ntoa(addr), port, (fh << 32) | fl, (th << 32) | tl


# ---------------------------------------------------------------- sockets


def open_socket(stack: ExitStack) -> socket.socket:
    sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_DGRAM))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    sock.bind((LOOPBACK, 0))
    sock.settimeout(1.0)
    return sock


def receive(sock: socket.socket, timeout: float) -> tuple[bytes, tuple[str, int]] | None:
    sock.settimeout(max(timeout, 0.001))
    try:
        return sock.recvfrom(65536)
    except TimeoutError:
        return None


def drain_until(socks: list[socket.socket], enough, total: float = 30.0) -> list[list[bytes]]:
    """Each socket's datagrams until ``enough(lists)`` holds: an event, with ``total`` seconds as a generous upper
    bound (then the caller's assertion says what was missing), never a measurement."""
    out: list[list[bytes]] = [[] for _ in socks]
    deadline = time.monotonic() + total
    with selectors.DefaultSelector() as selector:
        for index, sock in enumerate(socks):
            selector.register(sock, selectors.EVENT_READ, index)
        while not enough(out) and (remaining := deadline - time.monotonic()) > 0:
            for key, _ in selector.select(remaining):
                sock = socks[key.data]
                sock.settimeout(0)
                try:
                    out[key.data].append(sock.recv(65536))
                except BlockingIOError:
                    pass
                finally:
                    sock.settimeout(1.0)
    return out


def deliver_datagrams(sock: socket.socket, count: int) -> list[bytes]:
    """DELIVER datagrams until they hold ``count`` frames (an event), then any that arrive before a short quiet."""
    [datagrams] = drain_until([sock], lambda got: sum(len(parse_delivers(d)) for d in got[0] if d[0] == DELIVER)
                              >= count)
    return [d for d in datagrams + drain(sock, quiet=0.3) if d[0] == DELIVER]


def drain(sock: socket.socket, quiet: float = 0.3, total: float = 3.0, limit: int = 5000) -> list[bytes]:
    """Datagrams until ``quiet`` seconds pass without one (bounded by ``total`` and ``limit``): for what must NOT
    arrive (a generous wait can only let a wrong answer pass, never fail a right one); what must arrive is awaited
    with :func:`drain_until`."""
    out: list[bytes] = []
    deadline = time.monotonic() + total
    while len(out) < limit:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        got = receive(sock, min(quiet, remaining))
        if got is None:
            break
        out.append(got[0])
    return out


def wait_for(sock: socket.socket, kind: int, timeout: float = 2.0, limit: int = 5000) -> bytes | None:
    """The first datagram of frame type ``kind`` (others are skipped), or None after ``timeout``."""
    deadline = time.monotonic() + timeout
    for _ in range(limit):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return None
        got = receive(sock, remaining)
        if got is None:
            return None
        if got[0] and got[0][0] == kind:
            return got[0]
    return None


def keepalive(sock: socket.socket, backbone, flags: int = 0, addr: str = "0.0.0.0", port: int = 0) -> bytes:
    """Send a KEEPALIVE and return the KEEPALIVE-ACK (asserting that it echoes the token)."""
    token = os.urandom(16)
    sock.sendto(keepalive_frame(flags, token, addr, port), backbone.addr)
    ack = wait_for(sock, KEEPALIVE_ACK)
    assert ack is not None, "no KEEPALIVE-ACK"
    assert ack[1:17] == token
    return ack


def barrier(sock: socket.socket, backbone) -> None:
    """Everything ``sock`` sent before has been processed once this returns (one socket, FIFO)."""
    keepalive(sock, backbone, NOSUBSCRIBE | NOJOURNAL)


def delivers(sock: socket.socket, count: int, timeout: float = 3.0) -> list[tuple[int, bytes]]:
    """Collect DELIVER frames until ``count`` arrived or ``timeout`` passed (non-DELIVER datagrams skipped)."""
    frames: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + timeout
    for _ in range(count + 1000):
        if len(frames) >= count:
            break
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        got = receive(sock, remaining)
        if got is None:
            break
        if got[0] and got[0][0] == DELIVER:
            frames.extend(parse_delivers(got[0]))
    return frames


def no_deliver(sock: socket.socket, quiet: float = 0.5) -> bool:
    return not [d for d in drain(sock, quiet=quiet, total=quiet + 1) if d and d[0] == DELIVER]


# ---------------------------------------------------------------- rule 1: KEEPALIVE-ACK


def test_keepalive_ack_echoes_the_token_to_the_sender(backbone):
    with ExitStack() as stack:
        a, b = open_socket(stack), open_socket(stack)
        token_a, token_b = os.urandom(16), os.urandom(16)
        a.sendto(keepalive_frame(NOSUBSCRIBE, token_a), backbone.addr)
        b.sendto(keepalive_frame(NOSUBSCRIBE, token_b), backbone.addr)
        for sock, token in ((a, token_a), (b, token_b)):
            got = receive(sock, 2.0)
            assert got is not None, "no KEEPALIVE-ACK"
            data, source = got
            assert data == bytes([KEEPALIVE_ACK]) + token  # exactly 17 bytes, this sender's token
            assert source == backbone.addr
        # every KEEPALIVE is answered, also repeated ones
        for _ in range(5):
            token = os.urandom(16)
            a.sendto(keepalive_frame(NOSUBSCRIBE, token), backbone.addr)
            got = receive(a, 2.0)
            assert got is not None and got[0] == bytes([KEEPALIVE_ACK]) + token


# ---------------------------------------------------------------- rule 2: subscribers for 5 s
# To the millisecond (subscribed at 4.999 s, gone at 5 s, each KEEPALIVE renewing for 5 s from
# then) on the in-memory network, tests/protocol/test_memnet.py; here the lease runs out over the wire.


def test_a_subscriber_gets_nothing_more_than_five_seconds_after_its_last_keepalive(backbone):
    with ExitStack() as stack:
        sub, control, pub = open_socket(stack), open_socket(stack), open_socket(stack)
        keepalive(sub, backbone)
        t0 = time.monotonic()  # the backbone took the KEEPALIVE before this
        pub.sendto(push_frame(b"subscribed"), backbone.addr)
        assert [data for _, data in delivers(sub, 1, 1.0)] == [b"subscribed"]

        time.sleep(max(0.0, t0 + 5.5 - time.monotonic()))
        keepalive(control, backbone)  # a live subscriber proves the PUSH was delivered to someone
        pub.sendto(push_frame(b"after five and a half"), backbone.addr)
        assert [data for _, data in delivers(control, 1, 2.0)] == [b"after five and a half"]
        assert no_deliver(sub, 0.5), "a client got a DELIVER more than 5 s after its last KEEPALIVE"


def test_nosubscribe_client_gets_no_deliver(backbone):
    with ExitStack() as stack:
        quiet, sub, pub = open_socket(stack), open_socket(stack), open_socket(stack)
        keepalive(quiet, backbone, NOSUBSCRIBE)
        keepalive(sub, backbone)
        for i in range(5):
            pub.sendto(push_frame(b"m%d" % i), backbone.addr)
        assert len(delivers(sub, 5)) == 5
        assert no_deliver(quiet, 0.5)


# ---------------------------------------------------------------- rules 3 and 5: PUSH becomes DELIVER


def test_push_from_a_socket_that_never_sent_keepalive_is_delivered(backbone):
    with ExitStack() as stack:
        sub, pub = open_socket(stack), open_socket(stack)
        keepalive(sub, backbone)
        pub.sendto(push_frame(b"from a stranger"), backbone.addr)
        got = receive(sub, 2.0)
        assert got is not None
        data, source = got
        assert source == backbone.addr
        assert data == HEADER.pack(DELIVER, 15, 0, 1) + b"from a stranger"
        assert drain(pub, quiet=0.3) == [], "the publisher never subscribed and asked for no CONFIRM"


def test_sequences_are_continuous_from_one(backbone):
    with ExitStack() as stack:
        sub, pub = open_socket(stack), open_socket(stack)
        keepalive(sub, backbone)
        payloads = [b"single-%d" % i for i in range(10)]
        for payload in payloads:
            pub.sendto(push_frame(payload), backbone.addr)
        packed = [b"packed-%d" % i for i in range(10)]
        pub.sendto(b"".join(push_frame(p) for p in packed), backbone.addr)
        pub.sendto(push_frame(b""), backbone.addr)  # an empty message is a message too
        frames = delivers(sub, 21)
        assert frames == list(zip(range(1, 22), payloads + packed + [b""]))
        assert no_deliver(sub, 0.3)


# ---------------------------------------------------------------- BATCH and packed PUSH


def test_plain_subscriber_gets_one_frame_per_datagram_and_batch_subscriber_several(backbone):
    with ExitStack() as stack:
        plain, batch, pub = open_socket(stack), open_socket(stack), open_socket(stack)
        keepalive(plain, backbone)
        keepalive(batch, backbone, BATCH)
        payloads = [bytes([65 + i]) * 50 for i in range(20)]
        pub.sendto(b"".join(push_frame(p) for p in payloads), backbone.addr)

        plain_datagrams = deliver_datagrams(plain, 20)
        assert len(plain_datagrams) == 20
        for datagram in plain_datagrams:
            frames = parse_delivers(datagram)
            assert len(frames) == 1 and len(datagram) == 9 + len(frames[0][1])
        assert [f for d in plain_datagrams for f in parse_delivers(d)] == list(zip(range(1, 21), payloads))

        batch_datagrams = deliver_datagrams(batch, 20)
        batch_frames = [f for d in batch_datagrams for f in parse_delivers(d)]
        assert batch_frames == list(zip(range(1, 21), payloads))
        assert max(len(parse_delivers(d)) for d in batch_datagrams) > 1
        assert len(batch_datagrams) < 20


def test_packed_push_with_malformed_tail_delivers_the_good_prefix(backbone):
    with ExitStack() as stack:
        sub, pub = open_socket(stack), open_socket(stack)
        keepalive(sub, backbone)
        before = backbone.metric(MALFORMED)
        good = [b"one", b"two", b"three"]
        prefix = b"".join(push_frame(p) for p in good)
        tails = [
            HEADER.pack(PUSH, 500, 0, 0) + b"short",  # LENGTH runs past the datagram
            b"\x02\x00",  # a header cut short
            b"\x77junk-of-unknown-type",  # not a PUSH frame
        ]
        for tail in tails:
            pub.sendto(prefix + tail, backbone.addr)
        frames = delivers(sub, 9)
        assert frames == list(zip(range(1, 10), good * 3))
        barrier(pub, backbone)
        assert backbone.metric(MALFORMED) == before + 3
        # the tails consumed no sequence numbers
        pub.sendto(push_frame(b"next"), backbone.addr)
        assert delivers(sub, 1) == [(10, b"next")]


# ---------------------------------------------------------------- CONFIRM


def test_confirm_answers_tagged_push_and_a_retry_is_not_delivered_twice(backbone):
    with ExitStack() as stack:
        sub, pub = open_socket(stack), open_socket(stack)
        keepalive(sub, backbone)

        pub.sendto(push_frame(b"untagged", 0), backbone.addr)
        assert delivers(sub, 1) == [(1, b"untagged")]
        assert drain(pub, quiet=0.3) == [], "tag 0 must not be confirmed"

        tag = 0x0102_0304_0506
        pub.sendto(push_frame(b"tagged", tag), backbone.addr)
        got = receive(pub, 2.0)
        assert got is not None
        assert got[0] == CONFIRM_FRAME.pack(CONFIRM, *u48(tag), *u48(2))
        assert got[1] == backbone.addr
        assert delivers(sub, 1) == [(2, b"tagged")]  # the tag does not leak into DELIVER

        pub.sendto(push_frame(b"tagged", tag), backbone.addr)  # the retry of a publisher whose CONFIRM got lost
        got = receive(pub, 2.0)
        assert got is not None and got[0] == CONFIRM_FRAME.pack(CONFIRM, *u48(tag), *u48(2))
        assert no_deliver(sub, 0.4), "a retried PUSH was delivered twice"

        pub.sendto(push_frame(b"after", tag + 1), backbone.addr)
        got = receive(pub, 2.0)
        assert got is not None and got[0] == CONFIRM_FRAME.pack(CONFIRM, *u48(tag + 1), *u48(3))
        assert delivers(sub, 1) == [(3, b"after")]


# ---------------------------------------------------------------- rule 4: REQUEST becomes FORWARD


def test_request_is_forwarded_to_random_journaling_clients_only(backbone):
    with ExitStack() as stack:
        journal_a, journal_b, nojournal, requester, pub = (open_socket(stack) for _ in range(5))
        keepalive(journal_a, backbone)
        keepalive(journal_b, backbone)
        keepalive(nojournal, backbone, NOJOURNAL)
        keepalive(requester, backbone)  # a journaling client too: it must still never get its own request
        for i in range(3):
            pub.sendto(push_frame(b"m%d" % i), backbone.addr)
        assert len(delivers(requester, 3)) == 3

        rounds = 60
        for _ in range(rounds):
            requester.sendto(request_frame(1, 3), backbone.addr)
        expected = (FORWARD, LOOPBACK, requester.getsockname()[1], 1, 3)
        forwarded = drain_until([journal_a, journal_b], lambda got: sum(
            1 for datagrams in got for d in datagrams if d[0] == FORWARD) >= rounds)
        got = {}
        for name, sock, before in (("a", journal_a, forwarded[0]), ("b", journal_b, forwarded[1]),
                                   ("nojournal", nojournal, []), ("requester", requester, [])):
            got[name] = [parse_range(d) for d in before + drain(sock, quiet=0.3) if d[0] == FORWARD]
        assert got["nojournal"] == [] and got["requester"] == []
        assert len(got["a"]) + len(got["b"]) == rounds
        assert got["a"] and got["b"], f"not random: a got {len(got['a'])}, b got {len(got['b'])}"
        assert set(got["a"]) == set(got["b"]) == {expected}

        for sock, flags in ((journal_a, 0), (journal_b, 0), (nojournal, NOJOURNAL), (requester, 0)):
            keepalive(sock, backbone, flags)  # stay well inside the five seconds, also on a loaded machine
        # an explicit address of the source's own IP is passed on as given, and TO_SEQ is clipped to the
        # last sequence.  (The requester is now 127.0.0.1:4242, so the sending socket may get this one.)
        requester.sendto(request_frame(2, 99, LOOPBACK, 4242), backbone.addr)
        socks = [journal_a, journal_b, requester, nojournal]
        first = drain_until(socks, lambda got: any(d[0] == FORWARD for datagrams in got for d in datagrams))
        forwards = {
            name: [parse_range(d) for d in before + drain(s, quiet=0.3) if d[0] == FORWARD]
            for name, s, before in zip(("a", "b", "requester", "nojournal"), socks, first)
        }
        assert forwards.pop("nojournal") == []
        assert sum(forwards.values(), []) == [(FORWARD, LOOPBACK, 4242, 2, 3)]


# ---------------------------------------------------------------- foreign addresses


def test_keepalive_and_request_naming_a_foreign_address_are_refused(backbone):
    with ExitStack() as stack:
        client, journaler, pub = open_socket(stack), open_socket(stack), open_socket(stack)
        keepalive(journaler, backbone)
        pub.sendto(push_frame(b"x"), backbone.addr)
        assert len(delivers(journaler, 1)) == 1
        before = backbone.metric(FOREIGN_ADDRESS)
        port = client.getsockname()[1]

        client.sendto(keepalive_frame(NOSUBSCRIBE | NOJOURNAL, os.urandom(16), FOREIGN, port), backbone.addr)
        client.sendto(b"\x10" + socket.inet_aton(FOREIGN) + struct.pack(">H", port), backbone.addr)  # legacy form
        client.sendto(request_frame(1, 1, FOREIGN, port), backbone.addr)
        barrier(client, backbone)
        assert drain(client, quiet=0.3) == [], "a KEEPALIVE naming a foreign address was answered"
        assert [d for d in drain(journaler, quiet=0.3) if d[0] == FORWARD] == []
        assert backbone.metric(FOREIGN_ADDRESS) == before + 3

        # the same REQUEST naming the source itself is forwarded: the refusal was about the address
        client.sendto(request_frame(1, 1), backbone.addr)
        forward = wait_for(journaler, FORWARD)
        assert forward is not None and parse_range(forward) == (FORWARD, LOOPBACK, port, 1, 1)


def test_foreign_address_is_accepted_from_a_trusted_network(backbone_factory):
    backbone = backbone_factory(extra=["--trust-net", "127.0.0.0/8"])
    with ExitStack() as stack:
        client, journaler, pub = open_socket(stack), open_socket(stack), open_socket(stack)
        keepalive(journaler, backbone)
        pub.sendto(push_frame(b"x"), backbone.addr)
        assert len(delivers(journaler, 1)) == 1

        # NOSUBSCRIBE | NOJOURNAL: the backbone never has a reason to send anything to 127.0.0.2
        token = os.urandom(16)
        client.sendto(keepalive_frame(NOSUBSCRIBE | NOJOURNAL, token, FOREIGN, 4321), backbone.addr)
        got = receive(client, 2.0)
        assert got is not None and got[0] == bytes([KEEPALIVE_ACK]) + token  # the ACK goes to the source

        client.sendto(request_frame(1, 1, FOREIGN, 4321), backbone.addr)
        forward = wait_for(journaler, FORWARD)
        assert forward is not None and parse_range(forward) == (FORWARD, FOREIGN, 4321, 1, 1)
        assert backbone.metric(FOREIGN_ADDRESS) == 0


# ---------------------------------------------------------------- legacy KEEPALIVE (docs/protocol.md)


def test_legacy_seven_byte_keepalive_is_acked_and_subscribes(backbone):
    with ExitStack() as stack:
        named, zero, pub = open_socket(stack), open_socket(stack), open_socket(stack)
        named.sendto(b"\x10" + socket.inet_aton(LOOPBACK) + struct.pack(">H", named.getsockname()[1]), backbone.addr)
        zero.sendto(b"\x10" + bytes(6), backbone.addr)  # 0.0.0.0 / 0 = the packet's source
        for sock in (named, zero):
            got = receive(sock, 2.0)
            assert got is not None and got[0] == bytes([KEEPALIVE_ACK]) + bytes(16)
        pub.sendto(push_frame(b"hello legacy"), backbone.addr)
        for sock in (named, zero):
            got = receive(sock, 2.0)
            assert got is not None and got[0] == HEADER.pack(DELIVER, 12, 0, 1) + b"hello legacy"


# ---------------------------------------------------------------- robustness


def test_bad_datagrams_never_stop_the_backbone_and_are_counted(backbone):
    malformed = [
        b"",  # empty
        b"\x10",  # KEEPALIVE cut to its type byte
        keepalive_frame()[:28],  # one byte short
        keepalive_frame() + b"\x00",  # one byte too many for the frame
        b"\x10" + bytes(7),  # 8 bytes: neither 7 nor 29
        request_frame(1, 2)[:18],  # truncated REQUEST
        request_frame(1, 2) + b"\x00",  # oversize REQUEST
        RANGE.pack(REQUEST, bytes(4), 0, 0, 0, 0, 5),  # FROM_SEQ 0
        RANGE.pack(REQUEST, bytes(4), 0, 0, 9, 0, 5),  # FROM_SEQ > TO_SEQ
        b"\x02",  # PUSH type byte only
        b"\x02\x00\x05",  # PUSH header cut short
        HEADER.pack(PUSH, 100, 0, 0) + b"ten bytes!",  # PUSH LENGTH beyond the datagram
        HEADER.pack(PUSH, 65535, 0, 0),  # PUSH claiming the largest LENGTH, carrying nothing
        b"\x03" + bytes(30),  # unknown types
        b"\x80" + os.urandom(20),
        b"\xff",
        bytes(MAX_DATAGRAM),  # a maximal datagram of zero bytes (type 0)
        b"\x20" + bytes(20),  # KEEPALIVE-ACK of the wrong size
    ]
    unexpected = [
        HEADER.pack(DELIVER, 3, 0, 1) + b"abc",  # valid frames that only travel away from the backbone
        RANGE.pack(FORWARD, socket.inet_aton(LOOPBACK), 1, 0, 1, 0, 1),
        bytes([KEEPALIVE_ACK]) + bytes(16),
        CONFIRM_FRAME.pack(CONFIRM, 0, 1, 0, 1),
    ]
    with ExitStack() as stack:
        sock, sub = open_socket(stack), open_socket(stack)
        keepalive(sub, backbone)
        before = backbone.metrics()
        for datagram in malformed + unexpected:
            sock.sendto(datagram, backbone.addr)
        barrier(sock, backbone)  # still answers a KEEPALIVE afterwards
        assert backbone.proc.poll() is None
        after = backbone.metrics()
        assert after.get(MALFORMED, 0) - before.get(MALFORMED, 0) == len(malformed)
        assert after.get(UNEXPECTED_TYPE, 0) - before.get(UNEXPECTED_TYPE, 0) == len(unexpected)
        assert after[PUSHES] == before[PUSHES]
        assert no_deliver(sub, 0.3), "a bad datagram was delivered"
        # nothing was sequenced: the next message is still number 1
        sock.sendto(push_frame(b"still alive"), backbone.addr)
        assert delivers(sub, 1) == [(1, b"still alive")]


def test_max_payload_is_delivered_intact_and_no_client_gets_a_frame_it_cannot_take(backbone):
    with ExitStack() as stack:
        plain, batch, pub = open_socket(stack), open_socket(stack), open_socket(stack)
        keepalive(plain, backbone)
        keepalive(batch, backbone, BATCH)
        big = os.urandom(MAX_PAYLOAD)
        small = [b"s%d" % i * 100 for i in range(30)]
        pub.sendto(b"".join(push_frame(p) for p in small[:15]), backbone.addr)  # 15 frames in one datagram
        pub.sendto(push_frame(big), backbone.addr)  # exactly 65507 bytes: the largest IPv4 UDP payload
        pub.sendto(b"".join(push_frame(p) for p in small[15:]), backbone.addr)
        expected = list(zip(range(1, 32), small[:15] + [big] + small[15:]))

        plain_datagrams = deliver_datagrams(plain, len(expected))
        assert all(len(d) <= MAX_DATAGRAM for d in plain_datagrams)
        assert all(len(parse_delivers(d)) == 1 for d in plain_datagrams), "a plain client got a packed datagram"
        assert [f for d in plain_datagrams for f in parse_delivers(d)] == expected

        batch_datagrams = deliver_datagrams(batch, len(expected))
        assert all(len(d) <= MAX_DATAGRAM for d in batch_datagrams)
        assert [f for d in batch_datagrams for f in parse_delivers(d)] == expected
        assert len(batch_datagrams) < len(expected)
        assert drain(pub, quiet=0.2) == [], "the publisher is not a client and asked for nothing"


# ---------------------------------------------------------------- HEAD flag (project extension)


def test_head_flag_ack_carries_the_last_sequence(backbone):
    with ExitStack() as stack:
        sock, pub = open_socket(stack), open_socket(stack)
        ack = keepalive(sock, backbone, HEAD | NOSUBSCRIBE)
        assert len(ack) == 23 and U48.unpack(ack[17:]) == (0, 0)
        plain = keepalive(sock, backbone, NOSUBSCRIBE)
        assert len(plain) == 17, "without HEAD the ACK is the base protocol's 17 bytes"
        for i in range(7):
            pub.sendto(push_frame(b"m%d" % i), backbone.addr)
        barrier(pub, backbone)
        ack = keepalive(sock, backbone, HEAD | NOSUBSCRIBE)
        high, low = U48.unpack(ack[17:])
        assert len(ack) == 23 and (high << 32) | low == 7


# ---------------------------------------------------------------- sequences survive restarts


def last_sequence(backbone) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind((LOOPBACK, 0))
        ack = keepalive(sock, backbone, HEAD | NOSUBSCRIBE | NOJOURNAL)
    assert len(ack) == 23
    high, low = U48.unpack(ack[17:])
    return (high << 32) | low


def publish(backbone, payloads: list[bytes]) -> list[int]:
    """PUSH each payload and return the sequences the backbone DELIVERed them with."""
    with ExitStack() as stack:
        sub = open_socket(stack)
        keepalive(sub, backbone)
        for payload in payloads:
            sub.sendto(push_frame(payload), backbone.addr)
        frames = delivers(sub, len(payloads))
    assert [data for _, data in frames] == payloads
    return [seq for seq, _ in frames]


def test_restart_after_sigterm_continues_at_last_plus_one(backbone, backbone_factory):
    first = publish(backbone, [b"a", b"b", b"c", b"d", b"e"])
    assert first == [1, 2, 3, 4, 5]
    assert backbone.stop() == 0
    again = backbone_factory(state_dir=backbone.state_dir)
    assert last_sequence(again) == 5
    assert publish(again, [b"f", b"g"]) == [6, 7]
    assert again.stop() == 0
    third = backbone_factory(state_dir=backbone.state_dir, port=again.port)
    assert publish(third, [b"h"]) == [8]


def test_restart_after_kill_9_never_reuses_a_sequence(backbone, backbone_factory):
    issued = publish(backbone, [b"m%d" % i for i in range(10)])
    assert issued == list(range(1, 11))
    backbone.kill()
    second = backbone_factory(state_dir=backbone.state_dir)
    issued_again = publish(second, [b"n%d" % i for i in range(10)])
    assert min(issued_again) > max(issued)
    assert issued_again == list(range(issued_again[0], issued_again[0] + 10))  # still continuous
    second.kill()
    third = backbone_factory(state_dir=backbone.state_dir)
    assert last_sequence(third) >= max(issued_again)  # HEAD never claims less than was issued
    assert min(publish(third, [b"o"])) > max(issued_again)
