"""ConnectionOptions and TrackerOptions: what a BackboneConnection is told, checked once; what means nothing is
refused."""
from __future__ import annotations

import dataclasses

import pytest

from fyrehose.protocol import codec
from fyrehose.protocol.connection import KEEPALIVE_INTERVAL, BackboneConnection, ConnectionOptions, DeliverForm
from fyrehose.protocol.multicast import FALLBACK_INTERVALS
from fyrehose.protocol.tracker import SequenceTracker, TrackerOptions

BACKBONE = ("127.0.0.1", 2323)


def test_the_defaults_are_a_plain_subscriber_taking_messages():
    options = ConnectionOptions(flags=codec.FLAG_BATCH)
    assert options.keepalive_interval == KEEPALIVE_INTERVAL == 0.5
    assert options.delivers is DeliverForm.MESSAGES and not options.buffer_runs and not options.multicast
    assert options.tracker == TrackerOptions() and options.serves_forwards


@pytest.mark.parametrize("changes, message", [
    ({"delivers": DeliverForm.MESSAGES, "buffer_runs": True}, "buffer_runs needs delivers=UNIFORM_RUNS or ANY_RUNS"),
    ({"flags": codec.FLAG_NOSUBSCRIBE, "multicast": True}, "multicast needs a subscriber"),
    ({"multicast_fallback_after": 2.0}, "multicast_fallback_after needs multicast=True"),
    ({"multicast": True, "multicast_fallback_after": 0.0}, "multicast_fallback_after must be more than 0"),
    ({"flags": codec.FLAG_BATCH | codec.FLAG_MULTICAST}, "FLAG_MULTICAST is the connection's"),
    ({"flags": 0x40}, "not a combination of codec.FLAG_"),
    ({"flags": -1}, "not a combination of codec.FLAG_"),
    ({"keepalive_interval": 0.0}, r"keepalive_interval must be in \(0, 1\] seconds"),
    ({"keepalive_interval": 1.5}, r"keepalive_interval must be in \(0, 1\] seconds"),
    ({"confirm_retry": 0.0}, "confirm_retry must be more than 0"),
    ({"tracker": {"give_up_after": 1.0}}, "tracker must be a TrackerOptions, not dict"),
    ({"delivers": "runs"}, "delivers must be a DeliverForm"),
])
def test_what_means_nothing_is_refused_with_the_reason(changes, message):
    with pytest.raises(ValueError, match=message):
        ConnectionOptions(**{"flags": codec.FLAG_BATCH, **changes})


@pytest.mark.parametrize("delivers, buffer_runs, whole, varied", [
    (DeliverForm.MESSAGES, False, False, False),
    (DeliverForm.UNIFORM_RUNS, False, True, False),
    (DeliverForm.UNIFORM_RUNS, True, True, False),
    (DeliverForm.ANY_RUNS, False, True, True),
    (DeliverForm.ANY_RUNS, True, True, True),
])
def test_every_form_that_means_something_is_taken_and_reaches_the_connection(delivers, buffer_runs, whole, varied):
    connection = BackboneConnection(BACKBONE, ConnectionOptions(flags=codec.FLAG_BATCH, delivers=delivers,
                                                                buffer_runs=buffer_runs))
    assert (connection.whole_datagrams, connection.varied_runs, connection.buffer_runs) == (whole, varied, buffer_runs)


def test_options_are_frozen_and_compare_by_value():
    options = ConnectionOptions(flags=codec.FLAG_BATCH, tracker=TrackerOptions(give_up_after=3.0))
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.flags = 0  # type: ignore[misc]
    assert options == ConnectionOptions(flags=codec.FLAG_BATCH, tracker=TrackerOptions(give_up_after=3.0))
    assert dataclasses.replace(options, multicast=True).multicast  # and are checked again when changed
    with pytest.raises(ValueError, match="multicast needs a subscriber"):
        dataclasses.replace(options, flags=codec.FLAG_NOSUBSCRIBE, multicast=True)


def test_only_a_journaling_client_serves_forwards():
    forward = codec.encode(codec.Forward("127.0.0.1", 4000, 5, 9))
    journaling = BackboneConnection(BACKBONE, ConnectionOptions(flags=codec.FLAG_BATCH))
    assert journaling.serves_forwards and journaling.receive(forward, BACKBONE, 0.0).forwards
    for flags in (codec.FLAG_NOJOURNAL, codec.FLAG_NOSUBSCRIBE | codec.FLAG_NOJOURNAL):
        ignoring = BackboneConnection(BACKBONE, ConnectionOptions(flags=flags))
        assert not ignoring.serves_forwards and not ignoring.receive(forward, BACKBONE, 0.0).forwards
        assert ignoring.stats["forwards ignored"] == 1


def test_the_connection_keeps_the_flags_asked_and_its_own_changing_ones_apart():
    options = ConnectionOptions(flags=codec.FLAG_BATCH, multicast=True)
    connection = BackboneConnection(BACKBONE, options)
    assert connection.flags == codec.FLAG_BATCH | codec.FLAG_MULTICAST | codec.FLAG_HEAD | codec.FLAG_GONE
    assert connection.options is options and options.flags == codec.FLAG_BATCH
    assert connection.group_watch.after == FALLBACK_INTERVALS * KEEPALIVE_INTERVAL
    later = BackboneConnection(BACKBONE, dataclasses.replace(options, multicast_fallback_after=7.0))
    assert later.group_watch.after == 7.0


def test_the_tracker_gets_the_tracker_options():
    tracker_options = TrackerOptions(request_delay=0.0, give_up_after=3.0, max_buffered=10)
    connection = BackboneConnection(BACKBONE, ConnectionOptions(flags=codec.FLAG_BATCH, tracker=tracker_options))
    tracker = connection.track(1)
    assert tracker.options is tracker_options
    assert (tracker.request_delay, tracker.give_up_after, tracker.max_buffered) == (0.0, 3.0, 10)


def test_goodbye_is_a_keepalive_that_neither_subscribes_nor_journals():
    tokens = iter(range(1, 100))
    connection = BackboneConnection(BACKBONE, ConnectionOptions(flags=codec.FLAG_BATCH | codec.FLAG_HEAD),
                                    token_source=lambda size: next(tokens).to_bytes(size, "big"))
    goodbye, = codec.decode(connection.goodbye())
    assert goodbye == codec.Keepalive(flags=codec.FLAG_NOSUBSCRIBE | codec.FLAG_NOJOURNAL,
                                      token=(1).to_bytes(codec.TOKEN_SIZE, "big"))


@pytest.mark.parametrize("changes, message", [
    ({"request_delay": -0.1}, "request_delay must be 0 or more seconds"),
    ({"head_delay": -1}, "head_delay must be 0 or more seconds"),
    ({"give_up_after": 0}, "give_up_after must be more than 0"),
    ({"forward_rate": 0}, "forward_rate must be more than 0"),
    ({"retry_initial": 2.0}, r"retry_max \(1.0 s\) must not be below retry_initial \(2.0 s\)"),
    ({"max_buffered": 0}, "max_buffered must be at least 1 message"),
    ({"max_request_span": 0}, "max_request_span must be at least 1 message"),
    ({"give_up_after": float("nan")}, "give_up_after must be more than 0"),
])
def test_tracker_options_refuse_what_cannot_be_timed(changes, message):
    with pytest.raises(ValueError, match=message):
        TrackerOptions(**changes)
    with pytest.raises(ValueError, match=message):  # the tracker's own keywords are checked the same way
        SequenceTracker(1, **changes)


def test_a_tracker_takes_options_and_changes_to_them_by_name():
    options = TrackerOptions(give_up_after=3.0, request_delay=0.0)
    tracker = SequenceTracker(1, options, give_up_after=4.0)
    assert (tracker.give_up_after, tracker.request_delay) == (4.0, 0.0)
    assert tracker.options == dataclasses.replace(options, give_up_after=4.0)
    with pytest.raises(TypeError):
        SequenceTracker(1, give_up_later=4.0)  # a misspelt name is no option
