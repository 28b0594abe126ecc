"""The compiled outbox answers every sequence of replies, slots, pushes and closes as its .py does (tests/oracle.py)."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oracle import twins


@pytest.fixture(scope="module")
def builds():
    return twins("fyrehose.gateways.outbox")


class Framed:
    """A framing that marks what it framed, as the WebSocket framing wraps each RESP value."""

    def reply(self, data: bytes) -> bytes:
        return b"R" + data

    def push(self, data: bytes) -> bytes:
        return b"P" + data

    def close(self, reason: str) -> bytes:
        return b"C" + reason.encode()


data = st.binary(max_size=6)
steps = st.lists(st.one_of(
    st.tuples(st.just("reply"), data), st.tuples(st.just("push"), data), st.tuples(st.just("raw"), data),
    st.tuples(st.just("hold"), st.none()), st.tuples(st.just("fill"), st.tuples(st.integers(0, 8), data,
                                                                                  st.sampled_from([None, "bye"]))),
    st.tuples(st.just("close"), st.sampled_from(["QUIT", "bad input"])),
    st.tuples(st.just("close_now"), st.tuples(st.sampled_from(["idle"]), data)),
    st.tuples(st.just("take"), st.none()), st.tuples(st.just("held"), st.booleans()),
), max_size=30)


def play(module, framing, script) -> list:
    outbox = module.Outbox(framing)
    ready: list = []
    outbox.became_ready, outbox.owner = ready, "driver"
    slots: list = []
    seen: list = []
    for name, argument in script:
        if name == "hold":
            slots.append(outbox.hold())
        elif name == "fill":
            index, value, close = argument
            if slots:
                outbox.fill(slots[index % len(slots)], value, close)
        elif name == "close_now":
            outbox.close_now(*argument)
        elif name == "take":
            seen.append(outbox.take())
        elif name == "held":
            outbox.held = argument
        else:
            getattr(outbox, name)(argument)
        seen.append((outbox.closing, outbox.waiting, len(ready)))
    seen.append(outbox.take())
    return seen


@settings(max_examples=600, deadline=None)
@given(script=steps, framed=st.booleans())
def test_both_builds_write_the_same_bytes_in_the_same_order(builds, script, framed):
    built, source = builds
    assert play(built, Framed() if framed else None, script) == play(source, Framed() if framed else None, script)
