"""The compiled FrameRun and the backbone's PUSH-to-DELIVER byte work answer as their .py files do (tests/oracle.py)."""
from __future__ import annotations

from array import array

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fyrehose.protocol import codec

from oracle import plain, same, twins

EXAMPLES = settings(max_examples=300, deadline=None)


@pytest.fixture(scope="module")
def frame_runs():
    return twins("fyrehose.protocol.frame_run")


@pytest.fixture(scope="module")
def pushes():
    return twins("fyrehose.backbone.pushes")


sizes = st.lists(st.integers(0, 20), min_size=1, max_size=30)


@EXAMPLES
@given(sizes=sizes, first=st.integers(1, 1 << 40), uniform=st.booleans(), bounds=st.tuples(
    st.one_of(st.none(), st.integers(-2, 40)), st.one_of(st.none(), st.integers(-2, 40))))
def test_frame_runs_agree(frame_runs, sizes, first, uniform, bounds):
    built, source = frame_runs
    if uniform:
        sizes = [sizes[0]] * len(sizes)
    data = b"".join(codec.encode_deliver(first + index, bytes([index % 256]) * size) for index, size in enumerate(sizes))
    spans = None if uniform else codec.scan(data, codec.DELIVER)[0]
    step = codec.FRAME_HEADER + sizes[0] if uniform else 0
    runs = [module.FrameRun(first, len(sizes), step, data, spans) for module in (built, source)]
    assert plain(runs[0]) == plain(runs[1]) and runs[0].last == runs[1].last
    same(runs[0].payloads, runs[1].payloads)
    low, high = (None if bound is None else first + bound for bound in bounds)
    same(lambda: list(runs[0].messages(low, high)), lambda: list(runs[1].messages(low, high)))
    for seq in (first, first + len(sizes) - 1, first + len(sizes) // 2):
        same(lambda seq=seq: runs[0].payload(seq), lambda seq=seq: runs[1].payload(seq))


@st.composite
def push_datagrams(draw):
    """Packed PUSH frames of one size or of several, tagged, untagged or mixed, perhaps damaged."""
    count = draw(st.integers(1, 40))
    size = draw(st.integers(0, 12))
    tags = draw(st.one_of(st.just([0] * count), st.integers(1, 1 << 47).map(lambda t: list(range(t, t + count))),
                          st.lists(st.integers(0, (1 << 48) - 1), min_size=count, max_size=count)))
    lengths = [size] * count if draw(st.booleans()) else draw(st.lists(st.integers(0, 12), min_size=count,
                                                                       max_size=count))
    data = bytearray(b"".join(codec.encode_push(b"p" * length, tag) for length, tag in zip(lengths, tags)))
    if draw(st.booleans()):
        data[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0, 255))
    return draw(st.sampled_from([bytes, bytearray, memoryview]))(bytes(data))


@EXAMPLES
@given(datagram=push_datagrams(), first_seq=st.integers(1, 1 << 40))
def test_reading_and_stamping_pushes_agrees(pushes, datagram, first_seq):
    built, source = pushes
    step = same(lambda: built.uniform_frames(datagram), lambda: source.uniform_frames(datagram))
    if not step:
        return
    same(lambda: built.untagged(datagram, step), lambda: source.untagged(datagram, step))
    tags = same(lambda: built.frame_tags(datagram, step), lambda: source.frame_tags(datagram, step))
    numbers = range(tags[1], tags[2]) if tags[0] == "range" else array("Q", tags[2])
    same(lambda: built.confirm_block(numbers, first_seq), lambda: source.confirm_block(numbers, first_seq))
    buffers = [bytearray(datagram), bytearray(datagram)]
    same(lambda: built.stamp_uniform(buffers[0], step, first_seq), lambda: source.stamp_uniform(buffers[1], step,
                                                                                                first_seq))
    assert buffers[0] == buffers[1]


@EXAMPLES
@given(entries=st.lists(st.tuples(sizes, st.booleans(), st.booleans()), min_size=1, max_size=6),
       limit=st.integers(1, 300))
def test_batching_the_log_agrees(pushes, entries, limit):
    built, source = pushes
    logs: list[list] = [[], []]
    seq = 1
    for lengths, uniform, give_bounds in entries:
        if uniform:
            lengths = [lengths[0]] * len(lengths)
        data = memoryview(b"".join(codec.encode_deliver(seq + index, b"d" * length)
                                   for index, length in enumerate(lengths)))
        step = codec.FRAME_HEADER + lengths[0] if uniform else 0
        bounds = [(start, end) for start, end, _ in codec.scan(data, codec.DELIVER)[0]] if give_bounds else None
        for log, module in zip(logs, (built, source)):
            log.append(module.LogEntry(data, len(lengths), step, list(bounds) if bounds else None))
        seq += len(lengths)
    for mine, theirs in zip(*logs):
        same(mine.frame_bounds, theirs.frame_bounds)
        same(lambda mine=mine: list(mine.frames()), lambda theirs=theirs: list(theirs.frames()))
    parts = same(lambda: list(built.batch_parts(logs[0], limit)), lambda: list(source.batch_parts(logs[1], limit)))
    assert parts[0] == "list"
    built_parts, source_parts = list(built.batch_parts(logs[0], limit)), list(source.batch_parts(logs[1], limit))
    for mine, theirs in zip(built_parts, source_parts):
        same(lambda mine=mine: built.join_parts(mine), lambda theirs=theirs: source.join_parts(theirs))
