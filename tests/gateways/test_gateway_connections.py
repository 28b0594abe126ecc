"""The gateways' pure connections (Redis, NATS, Marlin, HTTP): bytes and results in, replies out, in order.

No socket, no loop: each connection is fed bytes as a client would send them,
its requests are answered as a driver would (at once, later, out of order, or
with a failure), and what its outbox releases is compared byte for byte.
"""
from __future__ import annotations

import random
import re
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from fyrehose.gateways.drivers.http.gateway import HttpGateway, HttpSettings
from fyrehose.gateways.http.connection import HttpConnection
from fyrehose.gateways.liveness import NatsLiveness
from fyrehose.gateways.marlin import protocol as marlin
from fyrehose.gateways.marlin.connection import MarlinConnection, MarlinRoutes
from fyrehose.gateways.nats.connection import NatsConnection, NatsRoutes, server_info
from fyrehose.gateways.redis.connection import RedisConnection, RedisRoutes
from fyrehose.gateways.requests import Publish, Snapshot
from fyrehose.subjects.envelope import Envelope, MsgType, Status, decode

from gateway_support import Deployment


class Driver:
    """Answers a connection's requests as a gateway would, on demand; collects everything it writes."""

    def __init__(self, connection) -> None:
        self.connection = connection
        self.out = b""
        self.seq = 0
        self.waiting: list = []
        self.published: list[Envelope] = []

    def take(self) -> None:
        self.out += self.connection.outbox.take()
        for request in self.connection.requests:  # published in the order asked, as the link does
            if isinstance(request, Publish):
                self.published.extend(decode(payload) for payload in request.payloads)
        self.waiting.extend(self.connection.requests)
        self.connection.requests.clear()

    def feed(self, data: bytes, now: float = 0.0) -> None:
        self.connection.receive(data, now)
        self.take()

    def answer(self, order=None, fail: str | None = None) -> None:
        """Answer every request waiting (and those the answers lead to), in ``order`` (a shuffle)."""
        while self.waiting:
            pending, self.waiting = self.waiting, []
            if order is not None:
                order.shuffle(pending)
            for request in pending:
                if isinstance(request, Publish):
                    if fail is not None:
                        self.connection.failed(request.token, fail)
                    else:
                        first = self.seq + 1
                        self.seq += len(request.payloads)
                        self.connection.published(request.token, list(range(first, self.seq + 1)))
                else:
                    assert isinstance(request, Snapshot)
                    self.connection.answered(request.token, None)
                self.take()


def redis() -> RedisConnection:
    return RedisConnection(RedisRoutes(), Deployment(), Counter())


def nats(**options) -> NatsConnection:
    return NatsConnection(NatsRoutes(Counter()), Deployment(), Counter(), info=server_info("S", "127.0.0.1", 4222),
                          peer="127.0.0.1:5", liveness=NatsLiveness(0.0), **options)


def marlin_connection() -> MarlinConnection:
    return MarlinConnection(MarlinRoutes(), Deployment(), Counter())


def http() -> HttpConnection:
    return HttpConnection(HttpGateway(HttpSettings(backbone="127.0.0.1:1")), Deployment(), 0.0)


def command(*args: bytes) -> bytes:
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(arg), arg) for arg in args)


REDIS_COMMANDS = [command(b"PUBLISH", b"a.b", b"x"), command(b"PUBLISH", b"c", b"yy"), b"PING\r\n",
                  command(b"SUBSCRIBE", b"s.t"), command(b"PING", b"hi"), command(b"UNSUBSCRIBE"),
                  command(b"CLIENT", b"SETNAME", b"me"), command(b"GET", b"k"), command(b"NOPE"),
                  b"PUBLISH inline.x y\r\n", command(b"HELLO", b"3"), command(b"PUBLISH", b"", b"z")]
NATS_OPERATIONS = [b"PUB a.b 2\r\nhi\r\n", b"PING\r\n", b"SUB a.> 1\r\n", b"UNSUB 1\r\n", b"PUB x 0\r\n\r\n",
                   b"HPUB h.x 12 14\r\nNATS/1.0\r\n\r\nhi\r\n", b"PUB a..b 1\r\nz\r\n", b"PONG\r\n",
                   b"PUB r.x _INBOX.r 1\r\nq\r\n"]
MARLIN_FRAMES = [marlin.encode(marlin.Message(7, b"ch", b"data")), marlin.encode(marlin.Subscribe(b"ch")),
                 marlin.encode(marlin.Unsubscribe(b"ch")), marlin.encode(marlin.Message(8, b"", b"x")),
                 marlin.encode(marlin.Unsubscribe(b"never")), marlin.encode(marlin.Response(True, b"no"))]
HTTP_REQUESTS = [b"POST /v1/publish/a.b HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc",
                 b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", b"GET /nowhere HTTP/1.1\r\nHost: x\r\n\r\n",
                 b"GET /v1/last/a.b HTTP/1.1\r\nHost: x\r\n\r\n", b"PUT /v1/publish/a.b HTTP/1.1\r\nHost: x\r\n\r\n",
                 b"POST /v1/publish/a.* HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"]

CASES = {
    "redis": (redis, lambda ops: b"".join(ops), st.lists(st.sampled_from(REDIS_COMMANDS), max_size=12)),
    "nats": (nats, lambda ops: b"CONNECT {}\r\n" + b"".join(ops), st.lists(st.sampled_from(NATS_OPERATIONS), max_size=12)),
    "nats-verbose": (nats, lambda ops: b'CONNECT {"verbose":true,"headers":true,"no_responders":true}\r\n' + b"".join(ops),
                     st.lists(st.sampled_from(NATS_OPERATIONS), max_size=12)),
    "nats-no-echo": (nats, lambda ops: b'CONNECT {"echo":false}\r\n' + b"".join(ops),
                     st.lists(st.sampled_from(NATS_OPERATIONS), max_size=12)),
    "marlin": (marlin_connection, lambda ops: b"".join(ops), st.lists(st.sampled_from(MARLIN_FRAMES), max_size=12)),
    "http": (http, lambda ops: b"".join(ops), st.lists(st.sampled_from(HTTP_REQUESTS), max_size=6)),
}


def run(kind: str, data: bytes, cuts: list[int], shuffle: random.Random | None, answer_each: bool) -> Driver:
    make, _, _ = CASES[kind]
    driver = Driver(make())
    driver.take()
    points = sorted({min(cut, len(data)) for cut in cuts} | {0, len(data)})
    for start, end in zip(points, points[1:]):
        driver.feed(data[start:end])
        if answer_each:
            driver.answer(shuffle)
    driver.answer(shuffle)
    return driver


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(sorted(CASES)), st.data())
def test_arbitrary_splits_and_answer_orders_give_the_same_replies(kind, data):
    operations = data.draw(CASES[kind][2])
    stream = CASES[kind][1](operations)
    whole = run(kind, stream, [], None, answer_each=True)
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=8))
    split = run(kind, stream, cuts, random.Random(data.draw(st.integers())), answer_each=data.draw(st.booleans()))
    assert _without_ids(split.out) == _without_ids(whole.out)
    assert [(m.subject, m.data) for m in split.published] == [(m.subject, m.data) for m in whole.published]
    assert split.connection.outbox.closing == whole.connection.outbox.closing


def _without_ids(out: bytes) -> bytes:
    """Output with the connection's own number (a counter of the process) left out."""
    return re.sub(rb'"client_id":\d+|\$2\r\nid\r\n:\d+', b"ID", out)


def test_a_publish_reply_waits_for_its_confirmation_and_what_follows_waits_behind_it():
    driver = Driver(redis())
    driver.feed(command(b"PUBLISH", b"a", b"1") + command(b"PUBLISH", b"b", b"2") + b"PING\r\nPING\r\n")
    assert driver.out == b"" and len(driver.waiting) == 1 and driver.connection.paused  # the PINGs wait unread
    driver.feed(b"PING\r\n")  # reading more while paused changes nothing
    assert driver.out == b""
    driver.answer()
    assert driver.out == b":0\r\n:0\r\n+PONG\r\n+PONG\r\n+PONG\r\n" and not driver.connection.paused


def test_pipelined_publishes_of_several_reads_are_answered_in_order_whatever_order_the_backbone_confirms():
    driver = Driver(redis())
    driver.feed(command(b"PUBLISH", b"a", b"1"))
    driver.feed(command(b"PUBLISH", b"b", b"2"))
    assert len(driver.waiting) == 2 and not driver.connection.paused  # PUBLISHes do not wait for each other
    first, second = driver.waiting
    driver.waiting = []
    driver.connection.published(second.token, [2])
    driver.take()
    assert driver.out == b""  # the second reply waits behind the first
    driver.connection.published(first.token, [1])
    driver.take()
    assert driver.out == b":0\r\n:0\r\n"


def test_a_refused_publish_among_pipelined_ones_keeps_its_place_between_their_replies():
    """A batch of PUBLISHes holds one place for all its replies: a refusal in the middle ends the batch first."""
    driver = Driver(redis())
    driver.feed(command(b"PUBLISH", b"a", b"1") + command(b"PUBLISH", b"", b"x") + command(b"publish", b"b", b"2")
                + command(b"Publish", b"_INTEREST.x", b"3") + command(b"PUBLISH", b"c", b"4")
                + command(b"SUBSCRIBE", b"a") + command(b"PUBLISH", b"a", b"5"))
    assert len(driver.waiting) == 3 and driver.connection.paused  # three batches; the SUBSCRIBE waits unread
    assert [m.data for m in driver.published] == [b"1", b"2", b"4"]
    driver.answer()
    assert driver.out == (b":0\r\n-ERR empty channel names cannot be carried on the backbone\r\n:0\r\n"
                          b"-NOPERM this user has no permissions to access one of the channels used as arguments\r\n"
                          b":0\r\n*3\r\n$9\r\nsubscribe\r\n$1\r\na\r\n:1\r\n"  # the SUBSCRIBE after the replies
                          b"-ERR Can't execute 'publish': only (P)SUBSCRIBE / (P)UNSUBSCRIBE / PING / QUIT are allowed "
                          b"in this context\r\n")
    assert [m.data for m in driver.published] == [b"1", b"2", b"4"]
    failing = Driver(redis())
    failing.feed(command(b"PUBLISH", b"a", b"1") + command(b"PUBLISH", b"b", b"2"))
    failing.answer(fail="timed out")
    assert failing.out == b"-ERR publish not confirmed by the backbone: timed out\r\n" * 2
    assert failing.connection.stats["publish failures"] == 2


def test_a_failed_publish_gets_each_protocols_error():
    redis_driver = Driver(redis())
    redis_driver.feed(command(b"PUBLISH", b"a", b"1") + b"PING\r\n")
    redis_driver.answer(fail="timed out")
    assert redis_driver.out == b"-ERR publish not confirmed by the backbone: timed out\r\n+PONG\r\n"
    nats_driver = Driver(nats())
    nats_driver.feed(b"CONNECT {}\r\nPUB a 1\r\nx\r\nPING\r\n")
    nats_driver.answer(fail="timed out")
    assert nats_driver.out.endswith(b"\r\n-ERR 'Publish Failed: timed out'\r\n")  # and no PONG
    assert nats_driver.connection.outbox.closing == "publish failed"
    marlin_driver = Driver(marlin_connection())
    marlin_driver.feed(marlin.encode(marlin.Message(41, b"ch", b"x")) + marlin.encode(marlin.Message(42, b"ch", b"y")))
    marlin_driver.answer(fail="timed out")
    frames = marlin.FrameParser().feed(marlin_driver.out)
    assert [frame.message for frame in frames] == [  # type: ignore[union-attr]
        b"message 41 not confirmed by the backbone: timed out", b"message 42 not confirmed by the backbone: timed out"]
    http_driver = Driver(http())
    http_driver.feed(HTTP_REQUESTS[0] + HTTP_REQUESTS[1])
    http_driver.answer(fail="timed out")
    assert http_driver.out.startswith(b"HTTP/1.1 503 Service Unavailable\r\n")
    assert b"publish not confirmed by the backbone: timed out\n" in http_driver.out
    assert http_driver.out.count(b"HTTP/1.1 ") == 2  # the pipelined /healthz answered after it


def test_a_verbose_nats_client_hears_ok_after_the_confirmation_and_its_pong_last():
    driver = Driver(nats())
    driver.feed(b'CONNECT {"verbose":true}\r\nPUB a 1\r\nx\r\nPUB b 1\r\ny\r\nSUB c 1\r\nPING\r\n')
    assert driver.out.endswith(b"\r\n+OK\r\n")  # the CONNECT's; the PUBs' wait for the backbone
    driver.answer()
    assert driver.out.endswith(b"\r\n+OK\r\n+OK\r\n+OK\r\n+OK\r\nPONG\r\n")


def test_a_nats_client_promised_nothing_is_read_on_while_its_pubs_wait_but_its_pong_does_not_overtake_them():
    driver = Driver(nats())
    driver.feed(b"CONNECT {}\r\nPUB a 1\r\nx\r\nSUB s 1\r\nPING\r\n")
    info = driver.out
    assert not driver.connection.paused and driver.connection.subscriptions  # the SUB did not wait
    driver.feed(b"PUB b 1\r\ny\r\n")
    assert len(driver.waiting) == 2 and driver.out == info
    driver.answer()
    assert driver.out == info + b"PONG\r\n"


def test_no_echo_holds_what_is_routed_until_the_publish_is_confirmed_then_drops_the_clients_own():
    routes = NatsRoutes(Counter())
    connection = NatsConnection(routes, Deployment(), Counter(), info={}, peer="p:1", liveness=NatsLiveness(0.0))
    driver = Driver(connection)
    driver.feed(b'CONNECT {"echo":false}\r\nSUB a 1\r\nPUB a 3\r\nown\r\n')
    start = len(driver.out)
    routes.route(1, Envelope("a", b"own"))  # the client's own message came back before its CONFIRM
    routes.route(2, Envelope("a", b"other"))
    driver.take()
    assert driver.out[start:] == b""
    driver.answer()
    assert driver.out[start:] == b"MSG a 1 5\r\nother\r\n"


def test_a_get_waits_for_the_cache_and_the_commands_after_it_for_the_get():
    driver = Driver(redis())
    driver.feed(command(b"GET", b"k") + b"PING\r\n")
    (ask,) = driver.waiting
    assert isinstance(ask, Snapshot) and ask.subject == "k" and driver.connection.paused
    driver.waiting = []
    driver.connection.answered(ask.token, Envelope("k", b"v", MsgType.INITIAL, Status.OK))
    driver.take()
    assert driver.out == b"$1\r\nv\r\n+PONG\r\n"


def test_quit_after_publishes_closes_once_they_are_answered():
    driver = Driver(redis())
    driver.feed(command(b"PUBLISH", b"a", b"1") + b"QUIT\r\nPING\r\n")
    assert driver.connection.outbox.closing is None
    driver.answer()
    assert driver.out == b":0\r\n+OK\r\n" and driver.connection.outbox.closing == "QUIT"


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(sorted(CASES)), st.binary(max_size=300), st.lists(st.integers(0, 300), max_size=4))
def test_garbage_never_raises_and_what_cannot_be_followed_is_an_error_then_a_close(kind, garbage, cuts):
    driver = run(kind, garbage, cuts, random.Random(0), answer_each=True)
    connection = driver.connection
    if kind == "redis" and b"-ERR Protocol error" in driver.out:
        assert connection.outbox.closing is not None
    if kind.startswith("nats") and connection.outbox.closing is not None:
        assert b"\r\n-ERR '" in driver.out
    if kind == "http" and driver.out and not driver.out.startswith(b"HTTP/1.1 "):
        raise AssertionError(driver.out[:100])


def test_each_protocols_error_for_input_it_cannot_follow():
    redis_driver = Driver(redis())
    redis_driver.feed(b"*1\r\n$x\r\nPING\r\n")
    assert redis_driver.out == b"-ERR Protocol error: invalid bulk length\r\n"
    assert redis_driver.connection.outbox.closing is not None
    nats_driver = Driver(nats())
    nats_driver.feed(b"CONNECT {}\r\nBOGUS\r\nPING\r\n")
    assert nats_driver.out.endswith(b"-ERR 'Unknown Protocol Operation'\r\n")
    assert nats_driver.connection.outbox.closing is not None
    marlin_driver = Driver(marlin_connection())
    marlin_driver.feed(b"\xff\xff\xff\xff\x00\x00")
    assert marlin_driver.connection.outbox.closing is not None and marlin_driver.out[4:7] == b"\x00\x02\x01"
    http_driver = Driver(http())
    http_driver.feed(b"NOT HTTP AT ALL\r\n\r\n")
    assert http_driver.out.startswith(b"HTTP/1.1 400 ") and http_driver.connection.outbox.closing is not None


def test_an_http_request_that_does_not_arrive_whole_in_time_is_408_and_a_silent_one_a_quiet_close():
    slow = http()
    slow.receive(b"POST /v1/publish/a HTTP/1.1\r\nHost: x\r\nContent-Length: 9\r\n\r\nabc", 1.0)
    assert slow.next_deadline() == 30.0  # counted from the connection (time 0)
    slow.handle_timers(29.9)
    assert slow.outbox.closing is None
    slow.handle_timers(30.0)
    assert slow.outbox.take().startswith(b"HTTP/1.1 408 ") and slow.outbox.closing is not None
    silent = http()
    silent.handle_timers(30.0)
    assert silent.outbox.take() == b"" and silent.outbox.closing == "idle for 30 s"


@given(st.text(alphabet="abc.", min_size=1, max_size=30).filter(lambda s: all(s.split("."))),
       st.one_of(st.none(), st.just("r.x")), st.one_of(st.none(), st.binary(max_size=50)), st.binary(max_size=300))
def test_a_payload_from_a_prepared_head_is_the_encoded_envelope_and_fits_one_backbone_message(subject, reply,
                                                                                             headers, data):
    from fyrehose.gateways.payloads import PreparedHeads, encoded, fitting
    from fyrehose.protocol.codec import MAX_PAYLOAD, PayloadTooLarge
    from fyrehose.subjects.envelope import encode

    message = Envelope(subject, data * 300, reply=reply, headers=headers)  # some beyond one backbone message
    whole = encode(message)
    fits = len(whole) <= MAX_PAYLOAD
    try:
        assert encoded(message) == whole and fits
    except PayloadTooLarge:
        assert not fits
    heads: PreparedHeads[bytes] = PreparedHeads(lambda name: name.decode(), limit=2)
    for _ in range(2):  # prepared, then taken as prepared
        prepared_subject, head = heads.get(subject.encode())
        assert prepared_subject == subject and head + data == encode(Envelope(subject, data))
    heads.get(b"other.1")
    heads.get(b"other.2")  # past the limit: forgotten and prepared again, never more than the limit kept
    assert heads.get(subject.encode()) == (subject, encode(Envelope(subject)))
    assert len(heads._heads) <= 2
    try:
        assert fitting(head + data * 300) == encode(Envelope(subject, data * 300))
    except PayloadTooLarge:
        assert len(encode(Envelope(subject, data * 300))) > MAX_PAYLOAD


def test_the_idle_deadline_waits_while_a_response_is_held_and_starts_again_after_it():
    driver = Driver(http())
    driver.feed(HTTP_REQUESTS[0], now=5.0)
    # the response waits for the backbone, not the client: the wait before it keeps its deadline only so that
    # the driver's timer stays armed, and at it nothing is due
    assert driver.connection.next_deadline() == 30.0
    driver.connection.handle_timers(31.0)  # time passes (the driver tells it with each call)
    assert driver.connection.outbox.closing is None and driver.connection.next_deadline() is None
    driver.answer()
    assert driver.out.startswith(b"HTTP/1.1 200 OK\r\n")
    assert driver.connection.next_deadline() == 31.0 + 30.0
