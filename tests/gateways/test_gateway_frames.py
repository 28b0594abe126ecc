"""Frames built once per message and shared by subscribers are byte for byte the frames built one by one."""
from __future__ import annotations

from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from fyrehose.gateways.nats import protocol as proto
from fyrehose.gateways.nats.connection import MessageFrames
from fyrehose.gateways.redis import protocol as resp
from fyrehose.gateways.redis.connection import RedisRoutes
from fyrehose.subjects.envelope import Envelope, MsgType, Status

tokens = st.text(alphabet="abcxyz019_-", min_size=1, max_size=8)
subjects = st.lists(tokens, min_size=1, max_size=4).map(".".join)
sids = st.text(alphabet="0123456789abc", min_size=1, max_size=6).map(str.encode)
payloads = st.binary(max_size=200)
blocks = st.one_of(st.none(), st.just(b"NATS/1.0\r\nA: b\r\n\r\n"), st.just(b"NATS/1.0 503\r\n\r\n"),
                   st.just(b"NATS/1.0\r\nA: b"))  # the last one is not a complete block: passed on as it is


@given(subjects, st.one_of(st.none(), subjects), payloads, blocks, st.lists(sids, min_size=1, max_size=5),
       st.booleans(), st.sampled_from([(MsgType.UPDATE, Status.OK), (MsgType.INITIAL, Status.NOT_FOUND)]))
def test_nats_frames_shared_by_subscriptions_equal_frames_built_alone(subject, reply, data, headers, sid_list,
                                                                      with_headers, kind):
    message = Envelope(subject, data, kind[0], kind[1], reply=reply, headers=headers)
    frames = MessageFrames.of(message)
    block = headers
    if kind != (MsgType.UPDATE, Status.OK):
        fields = f"Fyrehose-Type: {kind[0].name}\r\nFyrehose-Status: {kind[1].name}\r\n\r\n".encode()
        if headers is None:
            block = b"NATS/1.0\r\n" + fields
        elif headers.endswith(b"\r\n\r\n"):  # a well-formed block gets them after its own fields
            block = headers[:-2] + fields
    for sid in sid_list:
        encoded_reply = reply.encode() if reply else None
        if with_headers and block is not None:
            alone = proto.hmsg(subject.encode(), sid, encoded_reply, block, data)
        else:
            alone = proto.msg(subject.encode(), sid, encoded_reply, data)
        assert frames.frame(sid, with_headers) == alone


def test_a_snapshot_answer_with_its_sequence_reaches_nats_clients_with_type_and_status_after_it():
    answer = Envelope("_INBOX.x.1", b"v", MsgType.INITIAL, Status.STALE, headers=b"NATS/1.0\r\nFyrehose-Sequence: 42\r\n\r\n")
    block = b"NATS/1.0\r\nFyrehose-Sequence: 42\r\nFyrehose-Type: INITIAL\r\nFyrehose-Status: STALE\r\n\r\n"
    assert MessageFrames.of(answer).frame(b"7", True) == b"HMSG _INBOX.x.1 7 %d %d\r\n%sv\r\n" % (len(block), len(block) + 1, block)


class _Client:
    def __init__(self) -> None:
        self.sent: list[bytes] = []

    def send(self, data: bytes) -> None:
        self.sent.append(data)


class _Connection:
    checked = False  # no users file: nothing delivered is asked against a user's rights

    def __init__(self, resp3: bool) -> None:
        self.resp3 = resp3
        self.client = _Client()
        self.stats: Counter = Counter()

    def deliver(self, frame: bytes) -> None:
        self.client.send(frame)


@given(subjects, payloads, st.lists(st.booleans(), min_size=1, max_size=5))
def test_redis_frames_shared_by_subscribers_equal_frames_built_alone(subject, data, versions):
    routes = RedisRoutes()
    connections = [_Connection(resp3) for resp3 in versions]
    channel = subject.encode()
    for connection in connections:
        routes.channels.setdefault(channel, {})[connection] = None  # type: ignore[index]
    routes.route(1, Envelope(subject, data))
    for connection in connections:
        alone = resp.push([resp.bulk(b"message"), resp.bulk(channel), resp.bulk(data)], connection.resp3)
        assert connection.client.sent == [alone]
