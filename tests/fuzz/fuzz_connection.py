"""Fuzz target: a client's BackboneConnection takes any datagram from the backbone or a stranger and never raises.

The first byte of the input picks the sender (bit 0 clear: the backbone, set:
a stranger) and whether the connection keeps whole datagrams as runs (bit 1:
then no hole is open, so a run can be taken) and whether the datagram came on the multicast
group's socket (bit 2: the connection joined a group); the rest is the datagram.
Invariants: nothing from a stranger is stored, acknowledged, confirmed or
forwarded unless it re-delivers a hole the connection asked for, and nothing
from a stranger on the group counts at all; a run only
continues the stream; what is stored is what its events release, in order.
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import instrumented, main  # noqa: E402

with instrumented():
    from fyrehose import codec
    from fyrehose.connection import BackboneConnection
    from fyrehose.tracker import Message

BACKBONE = ("127.0.0.1", 2323)
STRANGER = ("127.0.0.1", 40000)

SEEDS = [
    b"\x00" + codec.encode_deliver(1, b"x"),
    b"\x01" + codec.pack([codec.Deliver(5, b"a"), codec.Deliver(6, b"bb")]),
    b"\x00" + codec.encode(codec.KeepaliveAck(token=(1).to_bytes(16, "big"), head=9)),
    b"\x00" + codec.encode_confirm(3, 4),
    b"\x01" + codec.encode(codec.Forward("127.0.0.1", 9, 1, 2)),
    b"\x02" + codec.pack([codec.Deliver(seq, b"abc") for seq in range(1, 40)]),
    b"\x03" + codec.pack([codec.Deliver(seq, b"abc") for seq in range(1, 40)]),
    b"\x04" + codec.pack([codec.Deliver(seq, b"abc") for seq in range(1, 40)]),
    b"\x05" + codec.encode_deliver(1, b"forged"),
    b"\x04" + codec.encode(codec.KeepaliveAck(token=(1).to_bytes(16, "big"), head=9)),
    b"\x00",
]


def check(data: bytes) -> None:
    tokens = iter(range(1, 1 << 20))
    whole = bool(data[:1] and data[0] & 2)
    group = bool(data[:1] and data[0] & 4)
    connection = BackboneConnection(BACKBONE, flags=codec.FLAG_BATCH | codec.FLAG_HEAD, whole_datagrams=whole,
                                    multicast=group,
                                    token_source=lambda size: next(tokens).to_bytes(size, "big"))
    tracker = connection.track(1)
    connection.poll(0.0)  # one KEEPALIVE: token 1 is outstanding
    if not whole:
        connection.receive(codec.encode_deliver(3, b"c"), BACKBONE, 0.0)  # a hole 1..2
        connection.poll(1.0)  # ...REQUESTed
    source = STRANGER if data[:1] and data[0] & 1 else BACKBONE
    incoming = (connection.receive_group if group else connection.receive)(data[1:], source, 1.0)
    if group and (source == STRANGER or data[1:2] != bytes([codec.DELIVER])):
        assert not (incoming.stored or incoming.events or incoming.acked), "the group took what only DELIVERs may"
    if source == STRANGER:
        assert not (incoming.acked or incoming.confirms or incoming.forwards or incoming.runs), "a stranger was obeyed"
        assert all(seq in (1, 2) for seq, _ in incoming.stored), "a stranger's DELIVER outside the asked hole"
    for run in incoming.runs:
        assert run.first == 1 and tracker.next == run.last + 1, "a run that does not continue the stream"
        assert [frame.seq for frame in codec.decode(run.data)] == list(range(run.first, run.last + 1))
    released = [event.seq for event in incoming.events if isinstance(event, Message)]
    assert released == sorted(released), "events out of order"
    assert tracker.next is not None


if __name__ == "__main__":
    main(check, SEEDS)
