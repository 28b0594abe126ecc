"""The per-message byte work of every backbone mode (fyrehose.backbone.pushes), against simple references.

The uniform fast path (strided slices instead of a loop per frame) must agree
exactly with the frame-by-frame codec on every input, and the batching must
be the greedy, never-splitting packing of docs/protocol.md.
"""
from __future__ import annotations

from array import array

from hypothesis import given, settings
from hypothesis import strategies as st

from fyrehose.backbone.core import Backbone
from fyrehose.backbone.pushes import (
    LogEntry,
    batch_parts,
    confirm_block,
    frame_tags,
    join_parts,
    stamp_uniform,
    uniform_frames,
    untagged,
)
from fyrehose.protocol import codec

FLAG_BATCH = codec.FLAG_BATCH


@st.composite
def push_datagrams(draw):
    """Packed PUSH datagrams, often of one frame size, sometimes tagged, sometimes with a bad tail."""
    count = draw(st.integers(1, 30))
    if draw(st.booleans()):
        size = draw(st.integers(0, 80))
        payloads = [draw(st.binary(min_size=size, max_size=size)) for _ in range(count)]
    else:
        payloads = [draw(st.binary(max_size=80)) for _ in range(count)]
    tags = [draw(st.sampled_from([0, 0, 0, 1, 1 << 40])) for _ in range(count)]
    datagram = b"".join(codec.encode_push(p, t) for p, t in zip(payloads, tags))
    if draw(st.integers(0, 4)) == 0:
        datagram += draw(st.binary(max_size=12))
    return datagram


def reference_step(datagram: bytes) -> int:
    spans, error = codec.scan(datagram, codec.PUSH)
    if error or not spans or any(tag for _, _, tag in spans):
        return 0
    sizes = {end - start for start, end, _ in spans}
    return sizes.pop() if len(sizes) == 1 else 0


@settings(max_examples=400, deadline=None)
@given(st.one_of(push_datagrams(), st.binary(max_size=100)))
def test_the_untagged_uniform_check_agrees_with_a_frame_by_frame_scan(datagram):
    for form in (datagram, memoryview(datagram), bytearray(datagram)):
        step = uniform_frames(form)
        assert (step if step and untagged(form, step) else 0) == reference_step(datagram)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 200), st.integers(1, 300), st.integers(1, (1 << 48) - 400))
def test_stamp_uniform_writes_what_encode_deliver_would(size, count, first):
    payloads = [bytes([(i * 7 + j) & 0xFF for j in range(size)]) for i in range(count)]
    buf = bytearray(b"".join(codec.encode_push(p) for p in payloads))
    stamp_uniform(buf, 9 + size, first)
    assert bytes(buf) == b"".join(codec.encode_deliver(first + i, p) for i, p in enumerate(payloads))


def test_stamp_crosses_a_32_bit_boundary_of_the_sequence():
    buf = bytearray(codec.encode_push(b"ab") * 4)
    stamp_uniform(buf, 11, (1 << 32) - 2)
    assert [f.seq for f in codec.decode(bytes(buf))] == [(1 << 32) - 2 + i for i in range(4)]


frames = st.lists(st.binary(max_size=60), min_size=1, max_size=12)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(frames, st.booleans()), min_size=1, max_size=8), st.integers(9, 400))
def test_batch_parts_pack_greedily_and_never_split_a_frame(groups, limit):
    entries = []
    expected: list[bytes] = []
    seq = 1
    for payloads, uniform in groups:
        if uniform:
            payloads = [payloads[0]] * len(payloads)
        encoded = [codec.encode_deliver(seq + i, p) for i, p in enumerate(payloads)]
        seq += len(payloads)
        expected.extend(encoded)
        view = memoryview(b"".join(encoded))
        step = len(encoded[0]) if uniform else 0
        entries.append(LogEntry(view, len(encoded), step))
    datagrams = [bytes(join_parts(parts)) for parts in batch_parts(entries, limit)]
    # the reference: greedy over whole frames
    reference, current = [], b""
    for frame in expected:
        if current and len(current) + len(frame) > limit:
            reference.append(current)
            current = b""
        current += frame
    reference.append(current)
    assert datagrams == reference


def test_backbone_delivers_a_uniform_datagram_like_single_frames():
    fast, slow = Backbone(), Backbone()
    for bb in (fast, slow):
        bb.receive(codec.encode(codec.Keepalive(flags=FLAG_BATCH)), ("10.0.0.1", 1), 0.0)
        bb.receive(codec.encode(codec.Keepalive()), ("10.0.0.2", 2), 0.0)
        bb.flush(0.0)
    payloads = [b"%05d" % i for i in range(50)]
    fast.receive(b"".join(codec.encode_push(p) for p in payloads), ("10.0.0.9", 9), 0.0)
    for p in payloads:
        slow.receive(codec.encode_push(p), ("10.0.0.9", 9), 0.0)
    got = {}
    for name, bb in (("fast", fast), ("slow", slow)):
        sends = [(bytes(data), addr) for data, addr in bb.flush(0.0).sends]
        got[name] = {addr: [f for data, a in sends if a == addr for f in codec.decode(data)]
                     for addr in (("10.0.0.1", 1), ("10.0.0.2", 2))}
        assert bb.counters["pushes"] == 50
    assert got["fast"] == got["slow"]
    assert [f.data for f in got["fast"][("10.0.0.1", 1)]] == payloads


def reference_uniform_frames(datagram: bytes) -> int:
    spans, error = codec.scan(datagram, codec.PUSH)
    if error or not spans:
        return 0
    sizes = {end - start for start, end, _ in spans}
    return sizes.pop() if len(sizes) == 1 else 0


@settings(max_examples=400, deadline=None)
@given(st.one_of(push_datagrams(), st.binary(max_size=100)))
def test_uniform_frames_and_their_tags_agree_with_a_frame_by_frame_scan(datagram):
    step = uniform_frames(datagram)
    assert step == reference_uniform_frames(datagram)
    if step:
        assert list(frame_tags(datagram, step)) == [tag for _, _, tag in codec.scan(datagram, codec.PUSH)[0]]
        assert untagged(datagram, step) == (reference_step(datagram) == step)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, (1 << 48) - 1), min_size=1, max_size=300), st.integers(1, (1 << 48) - 400))
def test_confirm_block_is_what_encode_confirms_makes(tags, first):
    pairs = [(tag, first + i) for i, tag in enumerate(tags)]
    assert confirm_block(array("Q", tags), first) == b"".join(codec.encode_confirms(pairs))


PUBLISHER = ("10.0.0.9", 9)
BATCHING, PLAIN = ("10.0.0.1", 1), ("10.0.0.2", 2)


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 40), st.integers(1, 120), st.integers(1, (1 << 48) - 200),
       st.sampled_from([PUBLISHER, BATCHING, PLAIN]), st.booleans())
def test_a_tagged_uniform_datagram_is_sequenced_confirmed_and_remembered_as_frame_by_frame(
        size, count, first_tag, publisher, retry):
    payloads = [bytes([(i * 5 + j) & 0xFF for j in range(size)]) for i in range(count)]
    tags = [first_tag + i for i in range(count)]
    datagram = b"".join(codec.encode_push(p, t) for p, t in zip(payloads, tags, strict=True))
    results = []
    for fast in (True, False):
        bb = Backbone()
        for addr, flags in ((BATCHING, FLAG_BATCH), (PLAIN, 0)):
            bb.receive(codec.encode(codec.Keepalive(flags=flags)), addr, 0.0)
        bb.flush(0.0)
        if fast:
            bb.receive(datagram, publisher, 0.0)
        else:  # the frame-by-frame path, as a datagram that is not uniform takes it
            bb._push_spans(datagram, codec.scan(datagram, codec.PUSH)[0], publisher, 0.0)
        out = [(bytes(data), addr) for data, addr in bb.flush(0.0).sends]
        if retry:  # the same datagram again: confirmed with the same numbers, sequenced nothing
            bb.receive(datagram, publisher, 1.0)
            out += [(bytes(data), addr) for data, addr in bb.flush(1.0).sends]
        results.append((out, dict(bb.counters), [bb.confirmed.lookup(publisher, tag) for tag in tags]))
    assert results[0] == results[1]
    assert results[0][2] == list(range(1, count + 1))
