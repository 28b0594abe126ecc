"""What a subject subscription yields, and how an initial value is ordered against live updates.

A subscriber asking the cache for a subject's initial value publishes
``_SUB.START.<subject>`` at sequence R; the cache answers with the record as it
stood at R, but that answer reaches the stream only later, after updates
published between R and the answer.  Handing those updates over first and the
initial afterwards would overwrite newer data with older.  :class:`InitialGate`
therefore holds the subject's updates until the answer arrives, then yields
the initial followed by the held updates newer than R (older ones are already
in the initial).  If no answer comes (no cache running), it asks again every
``retry`` seconds and releases what it holds after ``timeout``.  Pure: the
client feeds it stream events and time and sends the requests it returns.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from fyrehose.subjects.envelope import Envelope, MsgType, Status
from fyrehose.subjects.session_table import SUB_START_PREFIX, StartOptions
from fyrehose.subjects.snapshots import record_sequence


@dataclass(frozen=True, slots=True)
class SubjectMessage:
    """One enveloped message of a subject subscription: its stream sequence and the envelope."""

    seq: int
    envelope: Envelope

    @property
    def subject(self) -> str:
        return self.envelope.subject

    @property
    def data(self) -> bytes:
        return self.envelope.data

    @property
    def type(self) -> MsgType:
        return self.envelope.type

    @property
    def status(self) -> Status:
        return self.envelope.status

    @property
    def reply(self) -> str | None:
        return self.envelope.reply

    @property
    def session(self) -> str | None:
        return self.envelope.session

    @property
    def record_seq(self) -> int | None:
        """For a cache's snapshot answer: the sequence of the message that last changed the record (else None)."""
        return record_sequence(self.envelope)


ANSWER_TYPES = (MsgType.INITIAL, MsgType.SNAP, MsgType.DROP)  # drop: a relocate redirect answers too


class InitialGate:
    """Orders one literal subject's initial value before the updates that are newer than it."""

    def __init__(self, subject: str, now: float, *, timeout: float = 5.0, retry: float = 0.5) -> None:
        self.subject = subject
        self.deadline = now + timeout
        self.retry = retry
        self.next_request = now
        self.done = False
        self.timed_out = False
        self._requests: dict[str, int | None] = {}  # inbox -> sequence of that request in the stream
        self._held: list[SubjectMessage] = []

    @property
    def inboxes(self) -> list[str]:
        return list(self._requests)

    def request(self, inbox: str, now: float) -> Envelope:
        """A new attempt: the ``_SUB.START`` to publish (the caller stamps and signs it)."""
        self._requests[inbox] = None
        self.next_request = now + self.retry
        return Envelope(SUB_START_PREFIX + self.subject, StartOptions().encode(), reply=inbox)

    def request_seen(self, inbox: str, seq: int) -> None:
        """Our request came through the stream at ``seq``: the answer to it reflects everything before."""
        if inbox in self._requests and self._requests[inbox] is None:
            self._requests[inbox] = seq

    def update(self, message: SubjectMessage) -> list[SubjectMessage]:
        if self.done:
            return [message]
        self._held.append(message)
        return []

    def answer(self, inbox: str, message: SubjectMessage) -> list[SubjectMessage]:
        """An answer on one of our inboxes: the initial (under the subject it answers), then newer updates."""
        if self.done or inbox not in self._requests or message.type not in ANSWER_TYPES:
            return []
        since = self._requests[inbox]
        self.done = True
        held, self._held = self._held, []
        initial = SubjectMessage(message.seq, replace(message.envelope, subject=self.subject))
        return [initial] + [update for update in held if since is None or update.seq > since]

    def due(self, now: float) -> bool:
        """Whether to send another request now."""
        return not self.done and now >= self.next_request and now < self.deadline

    def expire(self, now: float) -> list[SubjectMessage]:
        """Past the timeout without an answer: stop waiting and release the held updates."""
        if self.done or now < self.deadline:
            return []
        self.done = self.timed_out = True
        held, self._held = self._held, []
        return held

    def next_deadline(self) -> float | None:
        return None if self.done else min(self.next_request, self.deadline)
