"""The channel bookkeeping the Redis and Marlin routes share: who subscribed, which subjects to open, what is announced."""
from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from fyrehose.gateways.channels import channel_to_subject_or_none
from fyrehose.gateways.subscribers import ChannelSubscribers

from gateway_support import Deployment


class Connection:
    """What the bookkeeping reads of a connection: the deployment whose interest it announces."""

    def __init__(self, deployment: Deployment) -> None:
        self.deployment = deployment


def test_a_channel_is_wanted_and_announced_while_anyone_here_subscribes_to_it():
    deployment = Deployment()
    table: ChannelSubscribers[Connection] = ChannelSubscribers()
    one, two = Connection(deployment), Connection(deployment)
    table.subscribe(b"news", one)
    table.subscribe(b"news", two)
    assert list(table.channels[b"news"]) == [one, two] and table.subjects == {"news"}
    assert deployment.interest.subjects == {"news": 2}
    table.unsubscribe(b"news", one)
    assert list(table.channels[b"news"]) == [two] and table.subjects == {"news"}
    table.unsubscribe(b"news", one)  # not subscribed (any more): nothing changes
    assert deployment.interest.subjects == {"news": 1}
    table.unsubscribe(b"news", two)
    assert table.channels == {} and table.subjects == set() and deployment.interest.subjects == {}


def test_a_channel_without_a_subject_is_kept_but_neither_opened_nor_announced():
    deployment = Deployment()
    table: ChannelSubscribers[Connection] = ChannelSubscribers()
    connection = Connection(deployment)
    table.subscribe(b"", connection)
    assert table.channels == {b"": {connection: None}} and table.subjects == set()
    assert deployment.interest.subjects == {}
    table.unsubscribe(b"", connection)
    assert table.channels == {}


CHANNELS = st.sampled_from([b"a", b"b.c", b"with space", b"", b"_CHAN.x", b"\xff"])


@given(st.lists(st.tuples(st.booleans(), st.integers(0, 2), CHANNELS), max_size=40))
def test_the_table_always_says_what_the_subscriptions_left_standing_say(steps):
    deployment = Deployment()
    table: ChannelSubscribers[Connection] = ChannelSubscribers()
    connections = [Connection(deployment) for _ in range(3)]
    standing: set[tuple[int, bytes]] = set()
    for subscribe, which, channel in steps:
        if subscribe:
            if (which, channel) in standing:
                continue  # a connection subscribes a channel once (the connections check it first)
            table.subscribe(channel, connections[which])
            standing.add((which, channel))
        else:
            table.unsubscribe(channel, connections[which])
            standing.discard((which, channel))
    expected = {channel: {connections[which] for which, c in standing if c == channel} for _, channel in standing}
    assert {channel: set(held) for channel, held in table.channels.items()} == expected
    subjects = {channel_to_subject_or_none(channel) for channel in expected} - {None}
    assert table.subjects == subjects
    counts: dict[str, int] = {}
    for _, channel in standing:
        subject = channel_to_subject_or_none(channel)
        if subject is not None:
            counts[subject] = counts.get(subject, 0) + 1
    assert deployment.interest.subjects == counts
