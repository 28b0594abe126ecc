"""The connection's path for the datagram that continues the stream gives what its general path gives.

:meth:`BackboneConnection.receive` takes the backbone's in-order DELIVERs of one
frame size in one step (``fyrehose.protocol.in_order``); a connection with
that step removed takes every datagram the general way (admission, scan,
per-frame checks).  Fed the same streams, in order or not, damaged or
forged, both must give back the same Incomings, timers, counters and tracker
state.
"""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from fyrehose.protocol import codec
from fyrehose.protocol.connection import BackboneConnection, ConnectionOptions, DeliverForm, Incoming
from fyrehose.protocol.frame_run import FrameRun
from fyrehose.protocol.in_order import continuing_step
from fyrehose.protocol.tracker import Message

from deliver_streams import BACKBONE, CLIENT_FLAGS, connection_for, feed, options, streams


class GeneralPathOnly(BackboneConnection):
    """A connection that never takes the in-order step."""

    def _continue(self, data: bytes, step: int, first: int, tracker: object) -> Incoming | None:
        return None


@settings(max_examples=400)
@given(connection_options=options(), start=st.sampled_from([None, 1, 2, 4]), stream=streams())
def test_the_in_order_step_changes_nothing_but_the_steps_taken(connection_options, start, stream):
    general = lambda: GeneralPathOnly(BACKBONE, connection_options, token_source=lambda size: b"\x00" * size)
    assert feed(connection_for(connection_options), start, stream) == feed(general, start, stream)


def test_a_lone_in_order_frame_goes_out_as_a_run_or_as_its_message():
    data = codec.encode_deliver(7, b"payload")
    runs = BackboneConnection(BACKBONE, ConnectionOptions(flags=CLIENT_FLAGS, delivers=DeliverForm.ANY_RUNS))
    runs.track(7)
    assert runs.receive(data, BACKBONE, 1.0) == Incoming(runs=[FrameRun(7, 1, len(data), data)], from_backbone=True)
    messages = BackboneConnection(BACKBONE, ConnectionOptions(flags=CLIENT_FLAGS))
    messages.track(7)
    assert messages.receive(data, BACKBONE, 1.0) == Incoming(stored=[(7, b"payload")], events=[Message(7, b"payload")],
                                                             from_backbone=True)
    assert runs.stats["delivered frames"] == messages.stats["delivered frames"] == 1


def test_continuing_step_recognises_only_the_expected_numbers_of_one_frame_size():
    one = codec.encode_deliver(5, b"abc")
    run = b"".join(codec.encode_deliver(seq, b"abc") for seq in range(5, 9))
    assert continuing_step(one, 5) == continuing_step(run, 5) == len(one)
    assert continuing_step(one, 4) == continuing_step(run, 6) == 0  # not where the stream stands
    assert continuing_step(one[:-1], 5) == continuing_step(run[:-1], 5) == 0  # truncated
    assert continuing_step(run + codec.encode_deliver(9, b"abcd"), 5) == 0  # frames of varied sizes
    assert continuing_step(codec.encode_push(b"abc", 5), 5) == 0  # not a DELIVER
    assert continuing_step(b"", 5) == continuing_step(one, 0) == continuing_step(one, 1 << 48) == 0
    skipping = codec.encode_deliver(5, b"abc") + codec.encode_deliver(7, b"abc")
    assert continuing_step(skipping, 5) == 0
