"""Which local clients subscribed to which channel: the bookkeeping the Redis and Marlin gateways' routes share.

A channel (:mod:`fyrehose.gateways.channels`) is subscribed by the set of
connections that asked for it; the subjects of the subscribed channels are
what the router opens of the stream (``wants``); and each subscription is
announced in the deployment's interest, so the other gateways count this
subscriber (a channel that has no subject receives nothing and is not
announced).  The routes of each protocol build their replies on this and
route the stream's messages through :attr:`ChannelSubscribers.channels`.
"""
from __future__ import annotations

from typing import Generic, Protocol, TypeVar

from fyrehose.gateways.channels import channel_to_subject_or_none
from fyrehose.gateways.requests import Deployment


class Subscriber(Protocol):
    """A connection, as the bookkeeping sees it: what it holds of the deployment, whose interest it announces."""

    deployment: Deployment


S = TypeVar("S", bound=Subscriber)


class ChannelSubscribers(Generic[S]):
    """The connections subscribed to each channel (in the order they subscribed), and the subjects of those channels."""

    def __init__(self) -> None:
        self.channels: dict[bytes, dict[S, None]] = {}
        self.subjects: set[str] = set()  # the subjects of the channels in ``channels``, for ``wants``

    def subscribe(self, channel: bytes, connection: S) -> None:
        subject = channel_to_subject_or_none(channel)
        if channel not in self.channels and subject is not None:
            self.subjects.add(subject)
        self.channels.setdefault(channel, {})[connection] = None
        if subject is not None:  # announced, so other gateways count this subscriber
            connection.deployment.interest.add(subject)

    def unsubscribe(self, channel: bytes, connection: S) -> None:
        connections = self.channels.get(channel)
        if connections is not None and connection in connections:
            del connections[connection]
            subject = channel_to_subject_or_none(channel)
            if not connections:
                del self.channels[channel]
                self.subjects.discard(subject)
            if subject is not None:
                connection.deployment.interest.remove(subject)
