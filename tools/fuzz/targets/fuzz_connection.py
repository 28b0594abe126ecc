"""Fuzz target: a client's BackboneConnection takes any datagram from the backbone or a stranger and never raises.

The first byte of the input picks the sender (bit 0 clear: the backbone, set:
a stranger) and whether the connection keeps whole datagrams as runs (bit 1:
then no hole is open, so a run can be taken; bit 3: runs of frames of varied
sizes too, as gateways and clients take them) and whether the datagram came on the multicast
group's socket (bit 2: the connection joined a group); the rest is the datagram.
Invariants: nothing from a stranger is stored, acknowledged, confirmed or
forwarded unless it re-delivers a hole the connection asked for, and nothing
from a stranger on the group counts at all; a run only continues the stream;
what is stored is what its events release, in order, each sequence once, both
on receipt and once every open hole is given up; the frames of a run a reader
of some subjects chooses (:func:`fyrehose.subjects.selection.wanted`) are
exactly those whose subject it wants.
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import instrumented, main  # noqa: E402

with instrumented():
    from fyrehose.protocol import codec
    from fyrehose.protocol.connection import BackboneConnection, ConnectionOptions, DeliverForm
    from fyrehose.protocol.tracker import Message
    from fyrehose.subjects.envelope import Envelope, encode, peek_subject
    from fyrehose.subjects.selection import wanted

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
    b"\x00" + codec.pack([codec.Deliver(1, b"a"), codec.Deliver(2, b"b")]),  # fills the hole: 3 comes out too
    b"\x01" + codec.pack([codec.Deliver(2, b"b"), codec.Deliver(1, b"a")]),  # a peer's answer to the REQUEST
    b"\x00" + codec.pack([codec.Deliver(5, b"e"), codec.Deliver(4, b"d")]),  # another hole, given up later
    b"\x0a" + codec.pack([codec.Deliver(seq, encode(Envelope("ab" if seq % 2 else "abc.d", b"x" * seq)))
                          for seq in range(1, 30)]),
    b"\x00",
]


def even_text(subject: bytes) -> bool:
    """A reader's ``decide``: subjects of an even length, and never one that is not UTF-8 (as every reader's)."""
    try:
        subject.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return len(subject) % 2 == 0


def check(data: bytes) -> None:
    tokens = iter(range(1, 1 << 20))
    whole = bool(data[:1] and data[0] & 2)
    group = bool(data[:1] and data[0] & 4)
    delivers = DeliverForm.MESSAGES if not whole else DeliverForm.ANY_RUNS if data[0] & 8 else DeliverForm.UNIFORM_RUNS
    options = ConnectionOptions(flags=codec.FLAG_BATCH | codec.FLAG_HEAD, multicast=group, delivers=delivers)
    connection = BackboneConnection(BACKBONE, options,
                                    token_source=lambda size: next(tokens).to_bytes(size, "big"))
    tracker = connection.track(1)
    connection.handle_timers(0.0)  # one KEEPALIVE: token 1 is outstanding
    stored: dict[int, bytes] = {}
    if not whole:
        stored.update(connection.receive(codec.encode_deliver(3, b"c"), BACKBONE, 0.0).stored)  # a hole 1..2
        connection.handle_timers(1.0)  # ...REQUESTed
    first_unreleased = tracker.next
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
        chosen = wanted(run.data, run.first, run.step, run.spans, run.first, {}, even_text)
        assert chosen == [(seq, payload) for seq, payload in run.messages()
                          if (subject := peek_subject(payload)) and len(subject.encode()) % 2 == 0], "chose wrongly"
    assert not incoming.runs or not incoming.events, "one datagram both as a run and as messages"
    new = [seq for seq, _ in incoming.stored] + [seq for run in incoming.runs for seq in range(run.first, run.last + 1)]
    assert len(set(new)) == len(new) and not set(new) & set(stored), "a message stored twice"
    stored.update(incoming.stored)
    for run in incoming.runs:
        stored.update(run.messages())
    released = released_in_order(incoming.events, incoming.runs, stored, first_unreleased, tracker.next)
    _, events = connection.handle_timers(1.0 + tracker.give_up_after)  # every hole given up: what was stored comes out
    released_in_order(events, [], stored, released, tracker.next)


def released_in_order(events: list, runs: list, stored: dict[int, bytes], first: int, after: int | None) -> int:
    """Check that ``events`` and ``runs`` account for ``first`` .. ``after - 1`` exactly once each, in order, every
    message as it was stored and every stored message among them released; return ``after``."""
    assert after is not None
    released: dict[int, bytes] = {}
    expected = first
    for event in events:
        if isinstance(event, Message):
            assert event.seq == expected, "events out of order, repeated or skipped"
            released[event.seq] = event.data
            expected += 1
        else:
            assert event.from_seq == expected <= event.to_seq, "events out of order, repeated or skipped"
            expected = event.to_seq + 1
    for run in runs:
        assert run.first == expected, "a run out of order"
        released.update(run.messages())
        expected = run.last + 1
    assert expected == after, "the events stop short of or go past the stream's next sequence"
    assert all(stored.get(seq) == data for seq, data in released.items()), "released what was not stored"
    assert all(released.get(seq) == data for seq, data in stored.items() if first <= seq < after), \
        "stored but passed over"
    return after

if __name__ == "__main__":
    main(check, SEEDS)
