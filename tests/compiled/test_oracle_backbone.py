"""The compiled backbone core and recent log answer as their .py files do (tests/oracle.py).

Both builds of :class:`~fyrehose.backbone.core.Backbone` are driven through the
same arbitrary history (subscribers joining, PUSH datagrams of any shape, the
one-frame latency path above all, REQUESTs, flushes, the recent log read back)
and must send the same datagrams, count the same things and hold the same
recent messages; both builds of :class:`~fyrehose.backbone.recent_log.RecentLog`
take the same entries into rings of any size and give back the same frames.
"""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fyrehose.backbone.pushes import LogEntry
from fyrehose.protocol import codec

from oracle import plain, same, twins

EXAMPLES = settings(max_examples=200, deadline=None)
PUBLISHERS = [("127.0.0.1", 40001), ("127.0.0.2", 40002)]
SUBSCRIBERS = [("127.0.0.1", 41000 + index) for index in range(3)]


@pytest.fixture(scope="module")
def cores():
    return twins("fyrehose.backbone.core")


@pytest.fixture(scope="module")
def recent_logs():
    return twins("fyrehose.backbone.recent_log")


@st.composite
def push_datagrams(draw):
    """Mostly one untagged frame (the latency path), else packed frames tagged or not, perhaps damaged."""
    if draw(st.integers(0, 2)):
        count, tags = 1, [0]
    else:
        count = draw(st.integers(1, 8))
        tags = draw(st.one_of(st.just([0] * count), st.integers(1, 1000).map(lambda t: list(range(t, t + count))),
                              st.lists(st.integers(0, 50), min_size=count, max_size=count)))
    lengths = draw(st.lists(st.integers(0, 30), min_size=count, max_size=count))
    data = bytearray(b"".join(codec.encode_push(bytes([length]) * length, tag) for length, tag in zip(lengths, tags)))
    if draw(st.integers(0, 5)) == 0:
        data[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0, 255))
    return draw(st.sampled_from([bytes, bytearray, memoryview]))(bytes(data))


events = st.one_of(
    st.tuples(st.just("keepalive"), st.sampled_from(SUBSCRIBERS), st.sampled_from(
        [codec.FLAG_BATCH, 0, codec.FLAG_NOJOURNAL | codec.FLAG_BATCH, codec.FLAG_HEAD, codec.FLAG_NOSUBSCRIBE])),
    st.tuples(st.just("push"), st.sampled_from(PUBLISHERS), push_datagrams()),
    st.tuples(st.just("request"), st.sampled_from(SUBSCRIBERS), st.integers(1, 40)),
    st.tuples(st.just("flush"), st.booleans(), st.just(None)),
    st.tuples(st.just("bytes"), st.sampled_from(PUBLISHERS), st.binary(max_size=20)),
)


def _apply(backbone, event, now: float):
    kind, who, what = event
    if kind == "keepalive":
        return backbone.receive(codec.encode(codec.Keepalive(flags=what, token=b"t" * codec.TOKEN_SIZE)), who, now)
    if kind == "push":
        return backbone.receive(what, who, now)
    if kind == "request":
        return backbone.receive(codec.encode(codec.Request("0.0.0.0", 0, what, what + 3)), who, now)
    if kind == "bytes":
        return backbone.receive(what, who, now)
    out = backbone.flush(now) if who else backbone.flush_control(now)
    backbone.keep_recent()
    return out.reserve, out.sends


@EXAMPLES
@given(history=st.lists(events, max_size=40), recent_bytes=st.sampled_from([0, 64, 300, 1 << 16]),
       batch_bytes=st.sampled_from([40, codec.MAX_DATAGRAM]))
def test_backbones_agree(cores, history, recent_bytes, batch_bytes):
    built, source = cores
    backbones = [module.Backbone(reserve_block=16, recent_bytes=recent_bytes, batch_bytes=batch_bytes,
                                 rng=__import__("random").Random(7)) for module in (built, source)]
    for step, event in enumerate(history):
        now = 1.0 + step * 0.01
        same(lambda event=event, now=now: _apply(backbones[0], event, now),
             lambda event=event, now=now: _apply(backbones[1], event, now))
    now = 2.0 + len(history) * 0.01
    same(lambda: (backbones[0].flush(now).sends, backbones[0].pending()),
         lambda: (backbones[1].flush(now).sends, backbones[1].pending()))
    assert backbones[0].counters == backbones[1].counters
    assert backbones[0].sequence.last_issued == backbones[1].sequence.last_issued
    recents = [backbone.recent for backbone in backbones]
    assert (recents[0].first, len(recents[0]), recents[0].bytes) == (recents[1].first, len(recents[1]), recents[1].bytes)
    same(lambda: recents[0].frames(0, 1 << 20), lambda: recents[1].frames(0, 1 << 20))


@st.composite
def entries(draw):
    """Sequenced DELIVER datagrams as the core logs them: consecutive numbers, one frame size or several."""
    out, seq = [], draw(st.integers(1, 1 << 40))
    for _ in range(draw(st.integers(0, 12))):
        count = draw(st.integers(1, 6))
        uniform = draw(st.booleans())
        sizes = [draw(st.integers(0, 20))] * count if uniform else draw(
            st.lists(st.integers(0, 20), min_size=count, max_size=count))
        data = b"".join(codec.encode_deliver(seq + index, bytes([index]) * size) for index, size in enumerate(sizes))
        out.append(LogEntry(memoryview(bytearray(data)), count, codec.FRAME_HEADER + sizes[0] if uniform else 0))
        seq += count + draw(st.sampled_from([0, 0, 0, 2]))
    return out


@EXAMPLES
@given(batches=st.lists(entries(), max_size=6), capacity=st.sampled_from([0, 30, 100, 500, 1 << 16]),
       probes=st.lists(st.integers(0, 200), max_size=6))
def test_recent_logs_agree(recent_logs, batches, capacity, probes):
    built, source = recent_logs
    logs = [built.RecentLog(capacity), source.RecentLog(capacity)]
    for batch in batches:
        for log in logs:
            log.add(batch)
        assert (logs[0].first, len(logs[0]), logs[0].bytes) == (logs[1].first, len(logs[1]), logs[1].bytes)
    first = logs[0].first or 0
    for probe in probes:
        seq = first + probe - 5
        same(lambda seq=seq: logs[0].frames(seq, seq + 7), lambda seq=seq: logs[1].frames(seq, seq + 7))
        same(lambda seq=seq: logs[0].datagram(seq), lambda seq=seq: logs[1].datagram(seq))
    assert plain(logs[0].frames(0, 1 << 48)) == plain(logs[1].frames(0, 1 << 48))
