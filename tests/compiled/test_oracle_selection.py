"""The compiled choice of a datagram's wanted frames answers as its .py does (tests/oracle.py)."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fyrehose.protocol import codec
from fyrehose.subjects.envelope import Envelope, encode

from oracle import same, twins


@pytest.fixture(scope="module")
def builds():
    return twins("fyrehose.subjects.selection")


payloads = st.one_of(
    st.binary(max_size=40),  # raw payloads and garbage
    st.builds(lambda subject, data: encode(Envelope(subject, data)),
              st.sampled_from(["a.b", "keep.1", "drop.2", "_INBOX.x.1", "é.ü"]), st.binary(max_size=20)),
    st.builds(lambda head, subject_len, rest: b"\xfb\x1e" + head + subject_len.to_bytes(2, "big") + rest,
              st.binary(min_size=4, max_size=4), st.integers(0, 70), st.binary(max_size=60)),  # damaged headers
)


@settings(max_examples=500, deadline=None)
@given(frames=st.lists(payloads, min_size=1, max_size=20), first=st.integers(1, 1 << 47),
       low=st.integers(-3, 25), uniform=st.booleans(), keep=st.sets(st.binary(max_size=8), max_size=4),
       limit=st.booleans())
def test_both_builds_choose_the_same_frames_and_remember_the_same_verdicts(builds, frames, first, low, uniform, keep,
                                                                          limit):
    built, source = builds
    if uniform:
        frames = [frames[0]] * len(frames)
    data = b"".join(codec.encode_deliver(first + index, payload) for index, payload in enumerate(frames))
    spans = None if uniform else codec.scan(data, codec.DELIVER)[0]
    step = codec.FRAME_HEADER + len(frames[0]) if uniform else 0
    verdicts = {name: {b"drop.2": False, b"keep.1": True} for name in ("built", "source")}
    if limit:  # full: the next new subject forgets them all
        for table in verdicts.values():
            table.update({b"%d" % n: False for n in range(built.MAX_VERDICTS - len(table))})

    def decide(subject: bytes) -> bool:
        return subject in keep or subject.startswith(b"a")

    same(lambda: built.wanted(data, first, step, spans, first + low, verdicts["built"], decide),
         lambda: source.wanted(data, first, step, spans, first + low, verdicts["source"], decide))
    assert verdicts["built"] == verdicts["source"]
