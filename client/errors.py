"""The client's own exceptions, apart from the client so that subscriptions and callers can share them."""
from __future__ import annotations

from fyrehose.tracker import Lost


class FyrehoseError(Exception):
    """Base of the client's own errors."""


class BackboneUnreachable(FyrehoseError):
    pass


class PublishTimeout(FyrehoseError):
    """No CONFIRM in time: the message may or may not have been published."""


class RequestTimeout(FyrehoseError):
    """No answer on the request's inbox in time."""


class MessagesLost(FyrehoseError):
    """Raised by a subscription for sequences that will never arrive; iteration may continue after it."""

    def __init__(self, lost: Lost) -> None:
        super().__init__(f"messages {lost.from_seq}..{lost.to_seq} lost ({lost.reason})")
        self.lost = lost
