"""The token bucket that paces a client's re-DELIVERs, on a manual clock: exact counts, no waiting."""
from __future__ import annotations

import pytest

from fyrehose.protocol.pacing import TokenBucket


def test_the_burst_goes_at_once_then_one_event_per_token():
    bucket = TokenBucket(rate=4.0, burst=2, now=0.0)
    assert [bucket.wait_time(0.0) for _ in range(3)] == [0.0, 0.0, 0.25]  # the third waits for a token: 1/4 s
    assert bucket.wait_time(0.125) == 0.125  # half a token has come: half the wait is left
    assert bucket.wait_time(0.25) == 0.0
    assert bucket.wait_time(0.25) == 0.25


def test_events_over_a_stretch_of_time_are_the_burst_plus_the_rate():
    bucket = TokenBucket(rate=8.0, burst=3, now=0.0)
    taken = 0
    for step in range(8 * 10 + 1):  # asked every 1/8 s for 10 s, taking everything allowed each time
        while bucket.wait_time(step / 8) == 0.0:
            taken += 1
    assert taken == 3 + 8 * 10


def test_an_idle_bucket_fills_only_up_to_its_burst():
    bucket = TokenBucket(rate=100.0, burst=5, now=0.0)
    answers = [bucket.wait_time(60.0) for _ in range(6)]
    assert answers == [0.0] * 5 + [0.01]


@pytest.mark.parametrize("rate, burst", [(0.0, 1), (-1.0, 1), (1.0, 0)])
def test_a_bucket_that_could_never_allow_anything_is_refused(rate, burst):
    with pytest.raises(ValueError, match="rate must be positive and burst at least 1"):
        TokenBucket(rate, burst, now=0.0)
