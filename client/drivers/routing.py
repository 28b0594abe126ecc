"""Which subscription, request or initial-value gate each event of the ordered stream belongs to.

The receive thread routes while callers subscribe, unsubscribe and wait for
request answers, so all of that state sits behind one lock here.  A whole
datagram is routed in one hold of it (:meth:`SubjectRouter.route_chosen`):
its frames are chosen by subject in one compiled step
(:mod:`fyrehose.subjects.selection`) against verdicts that every change of
the subscriptions forgets under the same lock, so a subscription made while a
datagram is routed either sees all of that datagram's matching messages or
none, exactly as message-by-message routing would.  The router
does no I/O: the client authenticates and opens envelopes before routing, and
sends what the router asks for (``_SUB.START`` through ``ask``) or hands back
(the subject of a ``_SUB.STOP``).  That keeps it testable without sockets.
"""
from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterable

from fyrehose.drivers.subscription import Subscription
from fyrehose.protocol.frame_run import FrameRun
from fyrehose.protocol.tracker import Lost, Message
from fyrehose.subjects.envelope import Envelope, EnvelopeError
from fyrehose.subjects.patterns import SubjectIndex
from fyrehose.subjects.selection import MAX_VERDICTS, wanted
from fyrehose.subjects.subscription_events import SubjectMessage


class SubjectRouter:
    """Subscriptions, subject patterns, initial-value gates and request inboxes of one client.

    ``new_inbox`` names a fresh reply subject for each ``_SUB.START`` attempt;
    ``ask`` publishes such a START envelope.  ``ask`` is called with the route
    lock held, so that the inbox is known before its answer can come back; it
    must not call back into the router.
    """

    def __init__(self, new_inbox: Callable[[], str], ask: Callable[[Envelope], None]) -> None:
        self._new_inbox = new_inbox
        self._ask = ask
        self._lock = threading.Lock()  # the route lock: guards everything below
        self._subscriptions: list[Subscription] = []
        self._patterns: SubjectIndex[Subscription] = SubjectIndex()
        self._gated: dict[str, Subscription] = {}  # inbox of an initial-value request -> its subscription
        self._waiters: dict[str, queue.Queue] = {}  # inbox of a request() -> where its answer goes
        self._verdicts: dict[bytes, bool] = {}  # subject -> whether a pattern or waiter wants it; emptied on changes

    @property
    def wants_envelopes(self) -> bool:
        """Whether opening envelopes is worth it; read without the lock, as a hint, on the receive thread."""
        return bool(self._patterns or self._gated or self._waiters)

    def wants_envelope(self, subject: str | None) -> bool:
        """Whether a message on ``subject`` needs its envelope opened (a hint read without the lock, as
        ``wants_envelopes``): any may match a pattern or gate, but only an inbox waited on answers a request."""
        return bool(self._patterns or self._gated) or subject in self._waiters

    # ------------------------------------------------------------ callers' side

    def add(self, subscription: Subscription, now: float) -> None:
        """Start routing to ``subscription``; one with a gate asks for its initial value at once."""
        with self._lock:
            self._verdicts.clear()
            if subscription.pattern is not None:
                self._patterns.add(subscription.pattern, subscription)
            if subscription.gate is not None:
                self._ask_initial(subscription, now)
            self._subscriptions.append(subscription)

    def remove(self, subscription: Subscription) -> str | None:
        """Stop routing to ``subscription``; the subject whose ``_SUB.STOP`` the client must send, if gated.

        The subscription itself is not closed: the client does that after
        sending the STOP.
        """
        with self._lock:
            self._verdicts.clear()
            if subscription in self._subscriptions:
                self._subscriptions.remove(subscription)
            if subscription.pattern is not None:
                self._patterns.discard(subscription.pattern, subscription)
            if subscription.gate is None:
                return None
            for name in subscription.gate.inboxes:
                self._gated.pop(name, None)
            return subscription.gate.subject

    def add_waiter(self, inbox: str, answers: queue.Queue) -> None:
        """Put what arrives on ``inbox`` into ``answers``; registered before the request goes out."""
        with self._lock:
            if len(self._verdicts) >= MAX_VERDICTS:
                self._verdicts.clear()
            self._verdicts[inbox.encode()] = True  # only its inbox became wanted
            self._waiters[inbox] = answers

    def remove_waiters(self, inboxes: Iterable[str]) -> None:
        with self._lock:
            for name in inboxes:
                self._waiters.pop(name, None)

    def close_all(self) -> None:
        """Close every subscription; without the lock, as the client stops, a late offer being harmless."""
        for subscription in self._subscriptions:
            subscription._close()

    # ------------------------------------------------------------ the receive thread's side

    def offer_lost(self, lost: Lost) -> None:
        """A loss concerns every subscription, whatever its pattern: it cannot know what the hole held."""
        with self._lock:
            for subscription in self._subscriptions:
                if not subscription.closed:
                    subscription._offer(lost)

    def route_raw(self, messages: list[Message]) -> None:
        """Messages that no pattern, gate or waiter needs (see ``wants_envelopes``): to every raw subscription."""
        with self._lock:
            for subscription in self._subscriptions:
                if subscription.pattern is None and not subscription.closed:
                    subscription._offer_many(messages)

    def route_runs(self, runs: list[FrameRun]) -> None:
        """Whole datagrams of messages that no pattern, gate or waiter needs: to every raw subscription, as they
        are (each reader turns them into messages when it reaches them)."""
        with self._lock:
            for run in runs:
                self._offer_raw_run(run)

    def route_chosen(self, run: FrameRun, open_envelope: Callable[[bytes], Envelope | None]) -> bool:
        """A whole datagram, in one lock hold: raw subscriptions get it as it is, patterns and waiters only the
        messages whose subject they want, opened by ``open_envelope`` (None: damaged, routed to nobody).

        False, with nothing routed, while a gate waits for its initial value: its requests and answers are
        routed message by message (:meth:`route`).
        """
        with self._lock:
            if self._gated:
                return False
            self._offer_raw_run(run)
            for seq, payload in wanted(run.data, run.first, run.step, run.spans, run.first, self._verdicts,
                                       self._decide):
                opened = open_envelope(payload)
                if opened is not None:
                    self._route_envelope(SubjectMessage(seq, opened))
        return True

    def route(self, message: Message, opened: Envelope | None) -> None:
        """One message in sequence order, with its envelope when the client opened (and accepted) one.

        Raw subscriptions get every message as it came; the envelope goes to
        waiters, gates and pattern subscriptions, all under one lock hold so
        that no subscription change falls between them.
        """
        with self._lock:
            for subscription in self._subscriptions:
                if subscription.pattern is None and not subscription.closed:
                    subscription._offer(message)
            if opened is None:
                return
            self._route_envelope(SubjectMessage(message.seq, opened))

    def next_deadline(self) -> float:
        """When :meth:`handle_timers` next has something to do: an initial value to ask again or to give up."""
        if not self._gated:  # the common case, checked without the lock
            return float("inf")
        with self._lock:
            deadlines = [deadline for s in self._gated.values()
                         if s.gate is not None and (deadline := s.gate.next_deadline()) is not None]
        return min(deadlines, default=float("inf"))

    def handle_timers(self, now: float) -> int:
        """Ask again for initial values that are due and release the gates past their timeout.

        Returns how many gates timed out now, for the client's ``initial timeouts`` count.
        """
        if not self._gated:  # the common case, checked without the lock
            return 0
        timed_out = 0
        with self._lock:
            for subscription in {id(s): s for s in self._gated.values()}.values():
                gate = subscription.gate
                if gate is None or gate.done:
                    continue
                if gate.due(now):
                    self._ask_initial(subscription, now)
                released = gate.expire(now)
                if gate.timed_out:
                    timed_out += 1
                    for name in gate.inboxes:
                        self._gated.pop(name, None)
                for event in released:
                    subscription._offer(event)
        return timed_out

    # ------------------------------------------------------------ with the lock held

    def _offer_raw_run(self, run: FrameRun) -> None:
        for subscription in self._subscriptions:
            if subscription.pattern is None and not subscription.closed:
                subscription._offer_run(run)

    def _decide(self, subject: bytes) -> bool:
        """Whether a pattern or a waiter wants messages on ``subject`` (remembered until the subscriptions change)."""
        try:
            text = subject.decode("utf-8")
            return text in self._waiters or bool(self._patterns.lookup(text))
        except (UnicodeDecodeError, EnvelopeError):  # no subject, or one no pattern can match
            return False

    def _ask_initial(self, subscription: Subscription, now: float) -> None:
        reply = self._new_inbox()
        self._gated[reply] = subscription
        self._ask(subscription.gate.request(reply, now))  # type: ignore[union-attr]  # only gated subscriptions reach here

    def _route_envelope(self, message: SubjectMessage) -> None:
        subject, reply = message.subject, message.reply
        if reply is not None and reply in self._gated:  # our own START, back from the backbone
            self._gated[reply].gate.request_seen(reply, message.seq)  # type: ignore[union-attr]  # only gated subscriptions are in _gated
        waiter = self._waiters.get(subject)
        if waiter is not None:
            waiter.put(message)
        gated = self._gated.get(subject)
        if gated is not None and gated.gate is not None:
            for event in gated.gate.answer(subject, message):
                gated._offer(event)
            if gated.gate.done:
                for name in gated.gate.inboxes:
                    self._gated.pop(name, None)
        for subscription in self._patterns.lookup(subject):
            if subscription.closed:
                continue
            if subscription.gate is not None and not subscription.gate.done:
                for event in subscription.gate.update(message):
                    subscription._offer(event)
            else:
                subscription._offer(message)
