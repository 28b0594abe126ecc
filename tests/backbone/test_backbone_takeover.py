"""The core's part of a takeover (docs/protocol.md, "Hot standby pair"): what a promoted standby holds, the
numbers it asks the journals for, and the GONE answers for the numbers nobody has."""
from __future__ import annotations

from fyrehose.backbone.core import RECOVERY_WINDOW, Backbone
from fyrehose.protocol import codec
from tests.backbone.test_backbone_core import PUB, A, B, C, D, delivered_seqs, ka, request, sends

SERVICE = ("10.0.0.100", 2323)  # the pair's virtual address


def test_a_request_for_gone_numbers_is_answered_with_gone_to_a_client_that_takes_it():
    bb = Backbone(reserved=200)
    bb.sequence.take(10)
    bb.gone.append((150, 200, codec.GONE_NEVER_SENT))
    ka(bb, A, 0.0, flags=codec.FLAG_GONE)
    ka(bb, B, 0.0)  # a journaling client
    bb.flush(0.0)
    request(bb, A, 0.1, 140, 160)
    out = sends(bb.flush(0.1))
    gone = [codec.decode_gone(data) for data, addr in out if addr == A and data[0] == codec.GONE]
    assert gone == [(150, 160, codec.GONE_NEVER_SENT)]
    assert [addr for data, addr in out if data[0] == codec.FORWARD] == [B]  # 140..149 may be held by B
    request(bb, A, 0.2, 150, 155)
    out = sends(bb.flush(0.2))
    assert [data[0] for data, _ in out] == [codec.GONE]  # all of it gone: no FORWARD
    ka(bb, C, 0.3)  # a client without the flag asks as the base protocol says and gets a FORWARD
    request(bb, C, 0.3, 150, 155)
    assert [data[0] for data, _ in sends(bb.flush(0.3)) if data[0] != codec.KEEPALIVE_ACK] == [codec.FORWARD]


def test_recovery_asks_every_journaler_and_passes_their_answers_to_the_subscribers():
    bb = Backbone(reserved=500)
    bb.sequence.take(300)
    for client in (A, B, C):
        ka(bb, client, 0.0, flags=codec.FLAG_NOJOURNAL if client == A else 0)
    bb.flush(0.0)
    bb.recover(101, 110, SERVICE, 1.0)
    out = sends(bb.flush(1.0))
    forwards = {addr: codec.decode(data)[0] for data, addr in out if data[0] == codec.FORWARD}
    assert forwards == {B: codec.Forward(*SERVICE, 101, 110), C: codec.Forward(*SERVICE, 101, 110)}
    answer = codec.pack([codec.Deliver(seq, b"r%d" % seq) for seq in (101, 102, 105, 130)])
    bb.receive(answer, B, 1.05)
    bb.receive(codec.encode_deliver(106, b"forged"), D, 1.05)  # asked nobody at D
    bb.receive(codec.encode_deliver(102, b"r102"), C, 1.06)  # a second copy
    out = sends(bb.flush(1.06))
    assert sorted(delivered_seqs(out, A)) == [101, 102, 105]  # each once, only what was asked for
    assert bb.counters["drop:unasked deliver"] == 1 and bb.counters["recovered"] == 3
    assert bb.next_deadline(1.1) == 1.0 + RECOVERY_WINDOW
    bb.flush(1.0 + RECOVERY_WINDOW)
    assert bb.gone == [(103, 104, codec.GONE_LOST), (106, 110, codec.GONE_LOST)]
    assert bb.counters["gone"] == 7
    bb.receive(codec.encode_deliver(107, b"late"), B, 2.0)  # the window is over: a stranger's DELIVER
    assert bb.counters["drop:unexpected type"] == 1


def test_a_standby_core_holds_replicated_frames_and_tags():
    bb = Backbone()
    frames = b"".join(codec.encode_deliver(seq, b"x%d" % seq) for seq in (41, 42, 43))
    bb.hold_replica(frames, 3, PUB, [(7, 3, 41)], 0.0)
    assert [seq for seq, _ in bb.recent.frames(1, 100)] == [41, 42, 43]
    assert bb.confirmed.lookup(PUB, 8) == 42 and bb.counters["replicated"] == 3
    # promoted: the retry of tag 8 is confirmed with its original number, not sequenced again
    bb.sequence.next = 16385
    bb.receive(codec.encode(codec.Push(b"x42", 8)), PUB, 1.0)
    out = sends(bb.flush(1.0))
    assert [codec.decode(data) for data, _ in out] == [[codec.Confirm(8, 42)]]
