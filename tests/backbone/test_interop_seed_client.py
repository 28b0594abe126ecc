"""A third-party client written from the base protocol of docs/protocol.md alone talks to the fyrehose backbone.

Nothing here comes from the fyrehose package: the client below knows only the
base protocol (docs/protocol.md, "Frames" and "Rules": big endian, one frame type in the first byte, the 29-byte
KEEPALIVE, PUSH with six unused zero bytes, one DELIVER per datagram, REQUEST
and FORWARD of 19 bytes, the 17-byte KEEPALIVE-ACK).  Two such clients publish,
receive each other's messages, and repair a gap through REQUEST -> FORWARD ->
DELIVER from the other client's own store, as client rules 2 and 4 of docs/protocol.md describe.
The backbone comes from the ``backbone`` fixture (tests/conftest.py).
"""
import os
import socket
import struct
import time

# the base protocol's frame types and KEEPALIVE flags (docs/protocol.md)
DELIVER = 0x1
PUSH = 0x2
REQUEST = 0x4
FORWARD = 0x8
KEEPALIVE = 0x10
KEEPALIVE_ACK = 0x20
NOSUBSCRIBE = 0x1
NOJOURNAL = 0x2

SEED_TYPES = {DELIVER, PUSH, REQUEST, FORWARD, KEEPALIVE, KEEPALIVE_ACK}


def pack_u48(value):
    return struct.pack(">HI", value >> 32, value & 0xFFFFFFFF)


def unpack_u48(data):
    high, low = struct.unpack(">HI", data)
    return (high << 32) | low


class SeedClient:
    """A base-protocol client (docs/protocol.md): keeps alive, publishes, stores, answers FORWARDs, re-requests gaps."""

    KEEPALIVE_EVERY = 0.9  # rule 1: at least every second

    def __init__(self, backbone, flags=0):
        self.backbone = backbone
        self.flags = flags
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        self.sock.bind(("127.0.0.1", 0))
        self.host, self.port = self.sock.getsockname()
        self.store = {}  # sequence -> data: this client's journal
        self.delivers = []  # (sequence, data, source) in arrival order, ignored ones excluded
        self.ignore = set()  # sequences to drop on arrival (to make a gap on purpose)
        self.ignored = []
        self.forwards = []  # (addr, port, from, to)
        self.answered = 0  # DELIVERs sent in answer to FORWARDs
        self.acked_tokens = []
        self.foreign = []  # anything the base protocol does not describe
        self._token = None
        self._last_keepalive = None

    def close(self):
        self.sock.close()

    # ------------------------------------------------------------ sending

    def keepalive(self):
        self._token = os.urandom(16)
        packet = struct.pack(">B4sH", KEEPALIVE, socket.inet_aton(self.host), self.port)
        packet += pack_u48(self.flags) + self._token
        assert len(packet) == 29
        self.sock.sendto(packet, self.backbone)
        self._last_keepalive = time.monotonic()
        return self._token

    def push(self, data):
        packet = struct.pack(">BH", PUSH, len(data)) + bytes(6) + data  # the 6 unused bytes are zero
        self.sock.sendto(packet, self.backbone)

    def request(self, from_seq, to_seq):
        packet = struct.pack(">B4sH", REQUEST, socket.inet_aton(self.host), self.port)
        packet += pack_u48(from_seq) + pack_u48(to_seq)
        assert len(packet) == 19
        self.sock.sendto(packet, self.backbone)

    def missing(self):
        """Sequences below the highest one received that this client does not hold (rule 2)."""
        if not self.store:
            return []
        return [seq for seq in range(1, max(self.store) + 1) if seq not in self.store]

    # ------------------------------------------------------------ receiving

    def poll(self, timeout):
        """Handle at most one datagram; False when none came within ``timeout``."""
        if self._last_keepalive is not None and time.monotonic() - self._last_keepalive > self.KEEPALIVE_EVERY:
            self.keepalive()
        self.sock.settimeout(max(timeout, 0.001))
        try:
            packet, source = self.sock.recvfrom(65535)
        except TimeoutError:
            return False
        kind = packet[0] if packet else None
        if kind == KEEPALIVE_ACK and len(packet) == 17:
            self.acked_tokens.append(packet[1:])
        elif kind == DELIVER and len(packet) >= 9:
            length = struct.unpack(">H", packet[1:3])[0]
            seq = unpack_u48(packet[3:9])
            data = packet[9:]
            if length != len(data):  # one DELIVER per datagram: LENGTH covers the rest
                self.foreign.append(packet)
            elif seq in self.ignore:
                self.ignore.discard(seq)
                self.ignored.append(seq)
            else:
                self.delivers.append((seq, data, source))
                self.store.setdefault(seq, data)  # rule 3: keep any one of duplicates
        elif kind == FORWARD and len(packet) == 19:
            addr = socket.inet_ntoa(packet[1:5])
            port = struct.unpack(">H", packet[5:7])[0]
            from_seq, to_seq = unpack_u48(packet[7:13]), unpack_u48(packet[13:19])
            self.forwards.append((addr, port, from_seq, to_seq))
            for seq in range(from_seq, min(to_seq, from_seq + 1000) + 1):  # rule 4: send what we store
                if seq in self.store:
                    data = self.store[seq]
                    self.sock.sendto(struct.pack(">BH", DELIVER, len(data)) + pack_u48(seq) + data, (addr, port))
                    self.answered += 1
        else:
            self.foreign.append(packet)
        return True


def pump(clients, until, timeout=3.0):
    """Let every client handle its datagrams until ``until()`` holds; bounded in time and count."""
    deadline = time.monotonic() + timeout
    for _ in range(10000):
        if until() or time.monotonic() > deadline:
            break
        for client in clients:
            while client.poll(0.01):
                pass
    return until()


def test_seed_clients_publish_receive_and_repair_a_gap_through_the_backbone(backbone):
    a = SeedClient(backbone.addr)
    b = SeedClient(backbone.addr)
    try:
        # KEEPALIVE (29 bytes) is answered by a 17-byte KEEPALIVE-ACK echoing the token
        token_a, token_b = a.keepalive(), b.keepalive()
        assert pump([a, b], lambda: token_a in a.acked_tokens and token_b in b.acked_tokens)

        # both publish; every message comes back to both as its own DELIVER datagram
        messages = [b"alpha from a", b"bravo from b", b"charlie from a", b"delta from b", b"", b"foxtrot from a"]
        a.ignore.add(3)  # a will lose message 3 on purpose
        for i, message in enumerate(messages):
            (a if i % 2 == 0 else b).push(message)
        expected = [(seq, data) for seq, data in enumerate(messages, start=1)]
        assert pump([a, b], lambda: len(a.delivers) >= 5 and len(b.delivers) >= 6)
        assert [(seq, data) for seq, data, _ in b.delivers] == expected
        assert [(seq, data) for seq, data, _ in a.delivers] == [m for m in expected if m[0] != 3]
        assert all(source == backbone.addr for _, _, source in a.delivers + b.delivers)
        assert a.ignored == [3]

        # a finds the gap by sequence and REQUESTs it; the backbone FORWARDs to b, which re-DELIVERs from its store
        assert a.missing() == [3]
        a.request(3, 3)
        assert pump([a, b], lambda: 3 in a.store)
        assert b.forwards == [(a.host, a.port, 3, 3)]
        assert a.forwards == []  # never asked to serve its own request
        assert b.answered == 1
        seq, data, source = a.delivers[-1]
        assert (seq, data) == (3, messages[2])
        assert source == (b.host, b.port)  # straight from the other client, not via the backbone
        assert a.missing() == []
        assert a.store == b.store == dict(expected)

        # nothing outside the base protocol ever reached a seed client
        pump([a, b], lambda: False, timeout=0.3)
        assert a.foreign == [] and b.foreign == []
        assert all(len(token) == 16 for token in a.acked_tokens + b.acked_tokens)
    finally:
        a.close()
        b.close()
