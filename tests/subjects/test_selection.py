"""Choosing a datagram's wanted frames in one step gives exactly what reading each message would."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from fyrehose.protocol import codec
from fyrehose.protocol.frame_run import FrameRun
from fyrehose.subjects.envelope import Envelope, encode, peek_subject
from fyrehose.subjects.selection import MAX_VERDICTS, wanted

subjects = st.sampled_from(["keep.a", "keep.b", "drop.a", "drop.b", "_INBOX.me.1", "é.ü", "x"])
payloads = st.one_of(
    st.builds(lambda subject, data: encode(Envelope(subject, data)), subjects, st.binary(max_size=30)),
    st.binary(max_size=30),  # raw payloads (and the odd one that looks like an envelope)
    st.builds(lambda subject, cut: encode(Envelope(subject, b"data"))[:cut], subjects, st.integers(0, 12)),  # cut short
    st.just(b"\xfb\x1e\x01\x00\x00\x00\x00\x00rest"),  # an empty subject
    st.just(b"\xfb\x1e\x01\x00\x00\x00\x00\x02\xff\xfe"),  # a subject that is not UTF-8
    st.just(b"\xfb\x1e\x07\x00\x00\x00\x00\x01a"),  # an unknown version
)


def _run(frames: list[bytes], first: int, uniform: bool) -> FrameRun:
    data = b"".join(codec.encode_deliver(first + index, payload) for index, payload in enumerate(frames))
    if uniform:
        return FrameRun(first, len(frames), codec.FRAME_HEADER + len(frames[0]), data)
    return FrameRun(first, len(frames), 0, data, codec.scan(data, codec.DELIVER)[0])


@settings(max_examples=400, deadline=None)
@given(frames=st.lists(payloads, min_size=1, max_size=30), first=st.integers(1, 1 << 47), uniform=st.booleans(),
       skip=st.integers(0, 31))
def test_the_chosen_frames_are_those_whose_subject_is_wanted_in_order_from_low_on(frames, first, uniform, skip):
    if uniform:
        frames = [frames[0]] * len(frames)
    run = _run(frames, first, uniform)
    asked: list[bytes] = []

    def decide(subject: bytes) -> bool:
        asked.append(subject)
        return subject.startswith(b"keep.")

    verdicts: dict[bytes, bool] = {}
    chosen = wanted(run.data, run.first, run.step, run.spans, first + skip, verdicts, decide)
    expected = [(seq, payload) for seq, payload in run.messages(first + skip)
                if (subject := peek_subject(payload)) and subject.startswith("keep.")]
    assert chosen == expected
    assert len(asked) == len(set(asked))  # every subject decided once
    assert all(verdicts[subject] == subject.startswith(b"keep.") for subject in asked)
    again: list[bytes] = []
    assert wanted(run.data, run.first, run.step, run.spans, first + skip, verdicts,
                  lambda subject: again.append(subject) or True) == expected  # remembered: decide is not asked
    assert again == []


def test_the_verdicts_never_grow_past_their_limit():
    verdicts = {b"%d" % n: False for n in range(MAX_VERDICTS)}
    run = _run([encode(Envelope("new.subject", b"x"))], 1, True)
    assert wanted(run.data, 1, run.step, None, 1, verdicts, lambda subject: True) == [(1, run.payload(1))]
    assert verdicts == {b"new.subject": True}


def test_a_run_taken_from_past_its_end_chooses_nothing():
    run = _run([encode(Envelope("keep.a", b"x"))] * 3, 10, True)
    assert wanted(run.data, 10, run.step, None, 13, {}, lambda subject: True) == []
    assert [seq for seq, _ in wanted(run.data, 10, run.step, None, 0, {}, lambda subject: True)] == [10, 11, 12]
