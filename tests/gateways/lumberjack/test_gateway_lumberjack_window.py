"""The per-connection window/ack state machine, against a model of a writer that obeys its window."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fyrehose.gateways.lumberjack.protocol import (
    VERSION_1,
    VERSION_2,
    LumberjackError,
    decode_acks,
    encode_ack,
    encode_compressed,
    encode_json,
    encode_key_value,
    encode_window,
)
from fyrehose.gateways.lumberjack.window import AckWindow


class WriterModel:
    """What a writer knows: the windows it sent and the acks it read, assigned to the oldest open window."""

    def __init__(self) -> None:
        self.windows: list[dict] = []  # version, size, seqs sent, acked count

    def open(self, version: int, size: int) -> None:
        self.windows.append({"version": version, "size": size, "seqs": [], "acked": 0})

    def may_send(self) -> bool:
        window = self.windows[-1]
        return len(window["seqs"]) - window["acked"] < window["size"]

    def read_acks(self, data: bytes) -> None:
        for version, seq in decode_acks(data):
            window = next(w for w in self.windows if w["acked"] < len(w["seqs"]))
            assert version == window["version"], "an ack carries its window's version"
            acked = window["seqs"].index(seq) + 1  # an ack names a sequence that was sent ...
            assert acked > window["acked"], "... and moves forward"
            window["acked"] = acked

    @property
    def acked(self) -> int:
        return sum(window["acked"] for window in self.windows)


@settings(max_examples=150)
@given(st.data())
def test_a_writer_within_its_windows_gets_acks_exactly_for_what_was_published(data):
    restart_each_window = data.draw(st.booleans(), "restart sequences per window (Beats) or continue (pylogbeat)")
    plan = data.draw(st.lists(st.tuples(st.sampled_from([VERSION_1, VERSION_2]), st.integers(1, 6),
                                        st.integers(1, 15)), min_size=1, max_size=6), "windows")
    machine = AckWindow()
    writer = WriterModel()
    handed_out = published = 0
    seq = 0

    def publish(count: int) -> None:
        nonlocal published
        writer.read_acks(machine.published(count))
        published += count
        assert writer.acked == published, "every published event is acked at once, nothing more"

    for version, size, count in plan:
        handed_out += len(machine.feed(encode_window(size, version)))
        writer.open(version, size)
        if restart_each_window:
            seq = 0
        for _ in range(count):
            while not writer.may_send():  # the writer blocks until acks come
                publish(data.draw(st.integers(1, handed_out - published)))
            seq += data.draw(st.integers(1, 3))
            writer.windows[-1]["seqs"].append(seq)
            frame = encode_json(seq, b"{}", version) if data.draw(st.booleans()) else \
                encode_key_value(seq, {"n": str(seq)}, version)
            events = machine.feed(frame)
            assert [event.seq for event in events] == [seq]
            handed_out += 1
            if handed_out > published and data.draw(st.booleans()):
                publish(data.draw(st.integers(1, handed_out - published)))
    if handed_out > published:
        publish(handed_out - published)
    assert all(window["acked"] == len(window["seqs"]) for window in writer.windows)
    assert machine.unacked == 0 and writer.acked == handed_out


def test_pipelined_windows_each_get_their_own_ack():
    machine = AckWindow()
    stream = encode_window(2) + encode_compressed([encode_json(1, b"{}"), encode_json(2, b"{}")]) \
        + encode_window(3, VERSION_1) + encode_key_value(1, {}) + encode_key_value(2, {}) + encode_key_value(3, {})
    assert len(machine.feed(stream)) == 5
    assert machine.published(1) == encode_ack(1)
    assert machine.published(3) == encode_ack(2) + encode_ack(2, VERSION_1)
    assert machine.published(1) == encode_ack(3, VERSION_1)


def test_keepalive_only_while_a_version_2_window_waits():
    machine = AckWindow()
    assert machine.keepalive() == b""
    machine.feed(encode_window(5) + encode_json(1, b"{}"))
    assert machine.keepalive() == encode_ack(0, VERSION_2)
    machine.published(1)
    assert machine.keepalive() == b""
    machine.feed(encode_window(5, VERSION_1) + encode_key_value(1, {}))
    assert machine.keepalive() == b""


@pytest.mark.parametrize("stream, message", [
    (encode_json(1, b"{}"), "before any window size frame"),
    (encode_window(5) + encode_json(2, b"{}") + encode_json(2, b"{}"), "sequence 2 after 2"),
    (encode_window(5) + encode_json(0, b"{}"), "sequence 0 after 0"),
])
def test_writers_breaking_the_rules_are_refused(stream, message):
    with pytest.raises(LumberjackError, match=message):
        AckWindow().feed(stream)


def test_the_window_is_advisory_a_v1_forwarder_streams_several_windows_in_flight():
    machine = AckWindow()
    stream = encode_window(1000, VERSION_1) + b"".join(encode_key_value(seq, {"n": str(seq)}) for seq in range(1, 3001))
    assert len(machine.feed(stream)) == 3000 and machine.unacked == 3000
    assert machine.published(1000) == encode_ack(1000, VERSION_1)
    assert machine.published(2000) == encode_ack(3000, VERSION_1)


def test_windows_that_grow_and_shrink_with_sequences_restarting_at_1():
    machine = AckWindow()
    sizes = [5, 2, 10, 1]
    stream = b"".join(encode_window(size) + encode_compressed([encode_json(seq, b"{}") for seq in range(1, size + 1)])
                      for size in sizes)
    assert len(machine.feed(stream)) == sum(sizes)
    assert machine.published(sum(sizes)) == b"".join(encode_ack(size) for size in sizes)


def test_a_partial_window_is_acked_as_far_as_it_arrived():
    machine = AckWindow()
    assert len(machine.feed(encode_window(1000) + encode_json(1, b"{}") + encode_json(2, b"{}"))) == 2
    assert machine.published(2) == encode_ack(2)


@pytest.mark.parametrize("level", range(10))
def test_every_compression_level(level):
    machine = AckWindow()
    frames = [encode_json(seq, b'{"level": %d}' % level) for seq in (1, 2, 3)]
    events = machine.feed(encode_window(3) + encode_compressed(frames, level=level))
    assert [event.seq for event in events] == [1, 2, 3]


def test_publishing_more_than_was_handed_out_is_a_driver_bug():
    machine = AckWindow()
    machine.feed(encode_window(2) + encode_json(1, b"{}"))
    with pytest.raises(ValueError):
        machine.published(2)
