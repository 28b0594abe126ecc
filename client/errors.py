"""fyrehose's own exceptions: the client's, and the ones a command reports to its user in one line.

They live apart from the client so that subscriptions, commands and callers can
share them.  Every :class:`FyrehoseError` that reaches the command line is
reported as one line and exit 1 (:mod:`fyrehose.commands.main`); an exception of any
other class is a bug and is shown with its traceback.
"""
from __future__ import annotations

from fyrehose.protocol.tracker import Lost


class FyrehoseError(Exception):
    """Base of fyrehose's own errors."""


class InputError(FyrehoseError, ValueError):
    """Bad input: an option or argument, or the content of a file fyrehose was pointed at.

    A ValueError too, so that callers that catch those still do.
    """


class CommandFailed(FyrehoseError, RuntimeError):
    """A command cannot do its job for a reason it explains in one line.

    A process or server that would not start or answer, an optional extra that
    is not installed, a check that found problems.  A RuntimeError too.
    """


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
