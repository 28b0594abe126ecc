"""Answering a FORWARD, pure: which DELIVERs answer it, and when each may go (the driver does the waiting)."""
from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from fyrehose.protocol import codec
from fyrehose.protocol.forwarding import Paced, deliveries
from fyrehose.protocol.pacing import TokenBucket


class Store:
    def __init__(self, count: int) -> None:
        self.messages = {seq: b"m%d" % seq for seq in range(1, count + 1)}

    def add_many(self, messages):
        self.messages.update(messages)

    def held(self, from_seq, to_seq):
        return [(seq, self.messages[seq]) for seq in range(from_seq, to_seq + 1) if seq in self.messages]


def test_deliveries_are_one_frame_each_for_what_the_store_holds():
    out = list(deliveries(Store(3), codec.Forward("127.0.0.1", 4000, 2, 5)))
    assert [codec.decode(datagram)[0].seq for datagram in out] == [2, 3]


def test_paced_says_when_the_next_may_go_and_takes_a_token_only_when_it_may():
    pacing = Paced([b"a", b"b", b"c"], TokenBucket(10.0, burst=2, now=0.0))
    assert pacing.next_send(0.0) == 0.0 and pacing.take() == b"a"
    assert pacing.next_send(0.0) == 0.0 and pacing.take() == b"b"
    wait = pacing.next_send(0.0)
    assert wait is not None and abs(wait - 0.1) < 1e-9  # the bucket is empty: a tenth of a second at 10/s
    assert pacing.next_send(0.1) == 0.0 and pacing.take() == b"c"
    assert pacing.next_send(0.1) is None  # nothing left: no token taken for it
    bucket = TokenBucket(10.0, burst=1, now=0.0)
    assert Paced([], bucket).next_send(0.0) is None and bucket.wait_time(0.0) == 0.0  # the token is still there


@given(st.integers(0, 30), st.floats(1.0, 1000.0), st.integers(1, 8))
def test_paced_hands_out_every_datagram_in_order_never_faster_than_the_rate(count, rate, burst):
    pacing = Paced([bytes([n]) for n in range(count)], TokenBucket(rate, burst=burst, now=0.0))
    now, sent = 0.0, []
    while (wait := pacing.next_send(now)) is not None:
        if wait > 0:
            now += max(wait, 1e-6)  # a real clock moves on; a float sum may absorb a wait of 1e-17
            continue
        sent.append((now, pacing.take()))
    assert [datagram for _, datagram in sent] == [bytes([n]) for n in range(count)]
    if count > burst:
        assert sent[-1][0] >= (count - burst) / rate - 1e-6
