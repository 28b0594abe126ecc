"""SequenceTracker.deliver_ahead: a run beyond everything seen is taken in one step, holes or not."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from fyrehose.protocol.tracker import Lost, Message, SequenceTracker

T0 = 10.0


def released(events) -> list[int]:
    out = []
    for event in events:
        out += range(event.from_seq, event.to_seq + 1) if isinstance(event, Lost) else [event.seq]
    return out


@settings(deadline=None)  # a loaded host may take longer than the default 200 ms
@given(st.lists(st.tuples(st.integers(1, 8), st.booleans()), min_size=1, max_size=40), st.randoms())
def test_runs_taken_ahead_or_one_by_one_release_every_sequence_once_in_order(runs, rng):
    tracker = SequenceTracker(1, max_buffered=10_000)
    chunks = []
    seq = 1
    for count, _ in runs:
        chunks.append(list(range(seq, seq + count)))
        seq += count
    first_pass = [chunk for chunk, (_, late) in zip(chunks, runs) if not late]
    late = [chunk for chunk, (_, late) in zip(chunks, runs) if late]
    rng.shuffle(late)
    out: list = []
    for chunk in first_pass + late:  # the late ones: the holes' answers, in any order
        events = tracker.deliver_ahead(chunk[0], [bytes([s % 256]) for s in chunk], T0)
        if events is None:
            for s in chunk:
                out += tracker.deliver(s, bytes([s % 256]), T0)
        else:
            out += events
    assert released(out) == list(range(1, seq))
    assert all(isinstance(m, Message) and m.data == bytes([m.seq % 256]) for m in out)
    assert tracker.holes == [] and tracker.duplicates == 0


def test_a_run_that_skips_opens_a_hole_and_is_released_when_the_hole_fills():
    tracker = SequenceTracker(1)
    assert tracker.deliver_ahead(1, [b"a", b"b"], T0) == [Message(1, b"a"), Message(2, b"b")]
    assert tracker.deliver_ahead(5, [b"e", b"f"], T0 + 1) == []
    assert tracker.holes == [(3, 4)] and tracker.highest == 6
    assert tracker.deliver_ahead(3, [b"c", b"d"], T0 + 2) is None  # not beyond: one by one
    tracker.deliver(3, b"c", T0 + 2)
    assert [m.seq for m in tracker.deliver(4, b"d", T0 + 2)] == [4, 5, 6]
    assert list(tracker.recoveries) == [1.0]
