"""SubjectRouter on its own: routing decisions without sockets, a backbone or threads."""
from __future__ import annotations

import itertools
import queue
import threading
import time

from fyrehose.drivers.routing import SubjectRouter
from fyrehose.drivers.subscription import Subscription
from fyrehose.protocol.codec import DELIVER, encode_deliver, scan
from fyrehose.protocol.frame_run import FrameRun
from fyrehose.protocol.tracker import Lost, Message
from fyrehose.subjects.envelope import Envelope, MsgType, decode, encode
from fyrehose.subjects.session_table import SUB_START_PREFIX
from fyrehose.subjects.subscription_events import InitialGate, SubjectMessage


def _router() -> tuple[SubjectRouter, list[Envelope]]:
    asked: list[Envelope] = []
    numbers = itertools.count(1)
    return SubjectRouter(lambda: f"_INBOX.test.{next(numbers)}", asked.append), asked


def _drain(subscription: Subscription) -> list:
    events = []
    while (event := subscription.get(timeout=0)) is not None:
        events.append(event)
    return events


def _send(router: SubjectRouter, seq: int, opened: Envelope | None, raw: bytes = b"raw") -> None:
    router.route(Message(seq, raw), opened)


def test_pattern_gets_only_matching_envelopes_and_raw_gets_everything():
    router, _ = _router()
    raw = Subscription(on_loss="yield")
    prices = Subscription(on_loss="yield", pattern="prices.*")
    router.add(raw, 0.0)
    router.add(prices, 0.0)
    assert router.wants_envelopes
    _send(router, 1, Envelope("prices.eur", b"1"))
    _send(router, 2, Envelope("news.today", b"2"))
    _send(router, 3, None, b"not an envelope")
    everything = _drain(raw)
    assert [event.seq for event in everything] == [1, 2, 3]
    assert all(isinstance(event, Message) for event in everything)
    got = _drain(prices)
    assert [(event.seq, event.subject, event.data) for event in got] == [(1, "prices.eur", b"1")]
    assert isinstance(got[0], SubjectMessage)


def test_raw_subscriptions_alone_do_not_want_envelopes():
    router, _ = _router()
    router.add(Subscription(), 0.0)
    assert not router.wants_envelopes


def test_lost_reaches_every_open_subscription():
    router, _ = _router()
    subscriptions = [Subscription(on_loss="yield"), Subscription(on_loss="yield", pattern="a.>")]
    for subscription in subscriptions:
        router.add(subscription, 0.0)
    router.offer_lost(Lost(5, 7, "gave up"))
    for subscription in subscriptions:
        assert _drain(subscription) == [Lost(5, 7, "gave up")]


def test_closed_subscription_receives_nothing():
    router, _ = _router()
    raw = Subscription(on_loss="yield")
    pattern = Subscription(on_loss="yield", pattern="a.b")
    router.add(raw, 0.0)
    router.add(pattern, 0.0)
    raw._close()
    pattern._close()
    router.offer_lost(Lost(1, 1, "gave up"))
    _send(router, 2, Envelope("a.b", b"x"))
    for subscription in (raw, pattern):
        assert subscription.queued == 1  # only the close marker
        assert subscription.get(timeout=0) is None


def test_removed_subscription_receives_nothing():
    router, _ = _router()
    pattern = Subscription(on_loss="yield", pattern="a.b")
    router.add(pattern, 0.0)
    assert router.remove(pattern) is None  # no gate: no _SUB.STOP
    _send(router, 1, Envelope("a.b", b"x"))
    assert _drain(pattern) == []
    assert not router.wants_envelopes


def test_waiter_gets_the_answer_on_its_inbox_until_removed():
    router, _ = _router()
    answers: queue.Queue = queue.Queue()
    router.add_waiter("_INBOX.me.1", answers)
    assert router.wants_envelopes
    _send(router, 1, Envelope("_INBOX.other.1", b"not ours"))
    _send(router, 2, Envelope("_INBOX.me.1", b"answer"))
    answer = answers.get_nowait()
    assert (answer.seq, answer.data) == (2, b"answer")
    assert answers.empty()
    router.remove_waiters(["_INBOX.me.1"])
    _send(router, 3, Envelope("_INBOX.me.1", b"late"))
    assert answers.empty()
    assert not router.wants_envelopes


def _gated(router: SubjectRouter, subject: str = "config.x", now: float = 0.0) -> Subscription:
    subscription = Subscription(on_loss="yield", pattern=subject)
    subscription.gate = InitialGate(subject, now, timeout=5.0, retry=0.5)
    router.add(subscription, now)
    return subscription


def test_gate_asks_at_once_and_orders_the_initial_before_newer_updates():
    router, asked = _router()
    subscription = _gated(router)
    assert [(start.subject, start.reply) for start in asked] == [(SUB_START_PREFIX + "config.x", "_INBOX.test.1")]
    _send(router, 10, asked[0])  # our START, sequenced at 10
    _send(router, 9, Envelope("config.x", b"old"))  # cannot happen in order; shows older updates are dropped
    _send(router, 11, Envelope("config.x", b"newer"))
    assert _drain(subscription) == []  # held until the answer
    _send(router, 12, Envelope("_INBOX.test.1", b"value", MsgType.INITIAL))
    got = _drain(subscription)
    assert [(event.seq, event.subject, event.data) for event in got] == [
        (12, "config.x", b"value"), (11, "config.x", b"newer")]
    _send(router, 13, Envelope("config.x", b"live"))
    assert [event.data for event in _drain(subscription)] == [b"live"]


def test_gate_timers_re_ask_then_time_out_and_release_each_at_its_deadline():
    router, asked = _router()
    assert router.next_deadline() == float("inf")  # no gate: nothing ever due
    subscription = _gated(router)
    _send(router, 1, Envelope("config.x", b"held"))
    assert router.next_deadline() == 0.5  # the retry
    assert router.handle_timers(0.1) == 0 and len(asked) == 1  # not due yet
    assert router.handle_timers(0.6) == 0 and len(asked) == 2  # retry on a new inbox
    assert asked[1].reply == "_INBOX.test.2"
    assert router.next_deadline() == 1.1
    assert router.handle_timers(5.0) == 1  # past the timeout: released without an initial
    assert [event.data for event in _drain(subscription)] == [b"held"]
    assert router.next_deadline() == float("inf")
    assert router.handle_timers(6.0) == 0


def test_removing_a_gated_subscription_gives_the_subject_to_stop():
    router, asked = _router()
    subscription = _gated(router)
    assert router.remove(subscription) == "config.x"
    _send(router, 5, Envelope(asked[0].reply, b"value", MsgType.INITIAL))  # an answer after the stop
    assert _drain(subscription) == []
    assert router.handle_timers(1.0) == 0 and len(asked) == 1  # the gate is forgotten: no more asking
    assert not router.wants_envelopes


# ---------------------------------------------------------------- a subscription's queue, datagram by datagram


def test_a_run_that_does_not_fit_is_queued_as_far_as_it_fits_and_the_rest_is_one_overrun():
    subscription = Subscription(on_loss="yield", max_queued=5)
    router, _ = _router()
    router.add(subscription, 0.0)
    router.route_raw([Message(seq, b"m") for seq in (1, 2, 3)])
    router.route_raw([Message(seq, b"m") for seq in range(4, 9)])
    events = [subscription.get(timeout=0) for _ in range(6)]
    assert [event.seq for event in events[:5]] == [1, 2, 3, 4, 5]
    assert events[5] == Lost(6, 8, "subscriber overrun")
    router.route_raw([Message(9, b"m")])
    assert subscription.get(timeout=0) == Message(9, b"m")


def test_a_waiting_reader_wakes_for_a_run_offered_from_another_thread():
    subscription = Subscription()
    got: queue.Queue = queue.Queue()
    reader = threading.Thread(target=lambda: got.put([subscription.get(timeout=10) for _ in range(3)]))
    reader.start()
    time.sleep(0.05)  # the reader waits on an empty queue
    subscription._offer_many([Message(seq, b"x") for seq in (1, 2, 3)])
    reader.join(10)
    assert [message.seq for message in got.get(timeout=1)] == [1, 2, 3]
    assert subscription.get(timeout=0) is None


def test_with_only_requests_waiting_only_their_inboxes_want_an_envelope_opened():
    router, _ = _router()
    assert not router.wants_envelope("prices.acme")
    router.add_waiter("_INBOX.test.9", queue.Queue())
    assert router.wants_envelope("_INBOX.test.9") and not router.wants_envelope("prices.acme")
    assert not router.wants_envelope(None)  # a raw payload
    router.add(Subscription(on_loss="yield", pattern="news.>"), 0.0)
    assert router.wants_envelope("prices.acme")  # a pattern may match any subject


def _datagram(first: int, payloads: list[bytes]) -> FrameRun:
    data = b"".join(encode_deliver(first + index, payload) for index, payload in enumerate(payloads))
    return FrameRun(first, len(payloads), 0, data, scan(data, DELIVER)[0])


def test_a_datagram_routed_whole_gives_raw_subscriptions_everything_and_patterns_and_waiters_their_subjects():
    router, _ = _router()
    raw = Subscription(on_loss="yield")
    prices = Subscription(on_loss="yield", pattern="prices.*")
    answers: queue.Queue = queue.Queue()
    for subscription in (raw, prices):
        router.add(subscription, 0.0)
    router.add_waiter("_INBOX.test.7", answers)
    payloads = [encode(Envelope("prices.eur", b"1")), encode(Envelope("news.today", b"2")), b"not an envelope",
                encode(Envelope("_INBOX.test.7", b"answer")), encode(Envelope("prices.usd", b"3"))[:-1] + b"4",
                b"\xfb\x1e\x01\x00\x00\x00\x00\x09prices.x\xff"]  # a subject that is not UTF-8: no subject at all
    opened: list[bytes] = []

    def open_envelope(payload: bytes) -> Envelope | None:
        opened.append(payload)
        return decode(payload)

    assert router.route_chosen(_datagram(10, payloads), open_envelope)
    assert [event.seq for event in _drain(raw)] == list(range(10, 16))
    assert [(event.seq, event.subject, event.data) for event in _drain(prices)] == [(10, "prices.eur", b"1"),
                                                                                    (14, "prices.usd", b"4")]
    assert answers.get(timeout=0).data == b"answer"
    assert len(opened) == 3  # the news, the raw payload and the damaged subject were never opened


def test_a_subscription_added_after_a_subject_was_decided_gets_it_from_the_next_datagram():
    router, _ = _router()
    router.add(Subscription(on_loss="yield", pattern="prices.*"), 0.0)
    run = _datagram(1, [encode(Envelope("news.today", b"1"))])
    assert router.route_chosen(run, decode)  # news decided: nobody wants it
    news = Subscription(on_loss="yield", pattern="news.>")
    router.add(news, 0.0)
    assert router.route_chosen(_datagram(2, [encode(Envelope("news.today", b"2"))]), decode)
    assert [(event.seq, event.data) for event in _drain(news)] == [(2, b"2")]


def test_while_a_gate_waits_for_its_initial_value_a_datagram_is_left_to_message_by_message_routing():
    router, asked = _router()
    raw = Subscription(on_loss="yield")
    router.add(raw, 0.0)
    gated = _gated(router, "prices.eur")
    assert asked  # the START went out: the gate waits
    assert not router.route_chosen(_datagram(1, [encode(Envelope("prices.eur", b"1"))]), decode)
    assert _drain(raw) == [] and _drain(gated) == []  # nothing routed: the caller routes it message by message
