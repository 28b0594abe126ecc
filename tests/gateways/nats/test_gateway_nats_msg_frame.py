"""A plain message framed from its encoded envelope is byte for byte the frame of the decoded envelope.

The decoded way (``NatsRoutes.route`` of ``decode(data)``) stays the oracle:
it still routes every message that is not plain.  For any bytes at all,
``route_plain`` either declines (False, nothing delivered) or delivers
exactly what the decoded way delivers, and it declines nothing plain.
"""
from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from fyrehose.gateways.nats.connection import MessageFrames, NatsRoutes, NatsSubscription
from fyrehose.gateways.nats.msg_frame import msg_tail, plain_fields
from fyrehose.subjects.envelope import Envelope, MsgType, Status, decode, encode

tokens = st.text(alphabet="abcxyz019_-é", min_size=1, max_size=8)
subjects = st.lists(tokens, min_size=1, max_size=4).map(".".join)
sids = st.text(alphabet="0123456789abc", min_size=1, max_size=6)
payloads = st.binary(max_size=200)


class _Recorder:
    """A connection that records the frames delivered to it, for a client with or without headers."""

    def __init__(self, headers: bool) -> None:
        self.headers = headers
        self.frames: list[tuple[int, str, bytes]] = []

    def deliver(self, seq: int, subscription: NatsSubscription, frames: MessageFrames) -> None:
        self.frames.append((seq, subscription.sid, frames.frame(subscription.sid_bytes, self.headers)))


def _routes(patterns: list[str], sid_list: list[str]) -> tuple[NatsRoutes, list[_Recorder]]:
    routes = NatsRoutes(Counter())
    recorders = []
    for index, (pattern, sid) in enumerate(zip(patterns, sid_list)):
        recorder = _Recorder(headers=index % 2 == 0)
        routes.add(NatsSubscription(recorder, sid, pattern, None))  # type: ignore[arg-type]
        recorders.append(recorder)
    return routes, recorders


def _both(data: bytes, patterns: list[str], sid_list: list[str]) -> tuple[bool, list, list]:
    """(whether route_plain took it, what it delivered, what the decoded way delivers)."""
    plain, plain_recorders = _routes(patterns, sid_list)
    taken = plain.route_plain(7, data)
    decoded, decoded_recorders = _routes(patterns, sid_list)
    opened = decode(data)
    if opened is not None:
        decoded.route(7, opened)
    return taken, [r.frames for r in plain_recorders], [r.frames for r in decoded_recorders]


patterns = st.lists(st.one_of(subjects, st.just(">"), st.just("a.*")), min_size=1, max_size=4)
sid_lists = st.lists(sids, min_size=5, max_size=5)  # one per pattern, the subject itself included


@settings(max_examples=300, deadline=None)
@given(subjects, st.one_of(st.none(), subjects), payloads, patterns, sid_lists, st.booleans())
def test_a_plain_envelope_is_taken_and_framed_as_the_decoded_way_frames_it(subject, reply, data, chosen, sid_list,
                                                                         reached):
    if reached:
        chosen = [*chosen, subject]
    taken, plain, decoded = _both(encode(Envelope(subject, data, reply=reply)), chosen, sid_list)
    assert taken
    assert plain == decoded
    if reached:
        assert any(plain)


@settings(max_examples=200, deadline=None)
@given(subjects, st.one_of(st.none(), subjects), payloads, sid_lists,
       st.sampled_from([(MsgType.INITIAL, Status.OK), (MsgType.UPDATE, Status.NOT_FOUND)]),
       st.one_of(st.none(), st.just(b"NATS/1.0\r\nA: b\r\n\r\n")), st.one_of(st.none(), st.just(("s", 3))),
       st.one_of(st.none(), st.just(b"d" * 32)))
def test_anything_but_a_plain_envelope_is_left_to_the_decoded_way(subject, reply, data, sid_list, kind, headers,
                                                                   session, digest):
    message = Envelope(subject, data, kind[0], kind[1], reply=reply, headers=headers,
                       session=session[0] if session else None, seqno=session[1] if session else None, digest=digest)
    if (kind, headers, session, digest) == ((MsgType.UPDATE, Status.OK), None, None, None):
        return
    taken, plain, _ = _both(encode(message), [">"], sid_list)
    assert not taken
    assert not any(plain)


pieces = st.one_of(st.binary(max_size=10), st.sampled_from(
    [b"\xfb\x1e\x01\x00\x00\x00", b"\xfb\x1e\x02\x00\x00\x01", b"\x00\x03", b"a.b", b"a..b", b"a.*", b"\xff", b"\x00\x00",
     b"\x00\x05_I.xy"]))


@settings(max_examples=600, deadline=None)
@given(st.lists(pieces, max_size=8), sid_lists)
def test_forged_bytes_are_declined_or_framed_as_the_decoded_way_frames_them(parts, sid_list):
    data = b"".join(parts)
    taken, plain, decoded = _both(data, [">", "a.*", "a.b", "_I.xy"], sid_list)
    if taken:
        assert decode(data) is not None
        assert plain == decoded
    else:
        assert not any(plain)


@given(payloads, st.integers(0, 210), st.one_of(st.none(), subjects.map(str.encode)))
def test_the_tail_is_the_one_of_the_payload_alone(data, start, reply):
    start = min(start, len(data))
    payload = data[start:]
    expected = b" %s %d\r\n%s\r\n" % (reply, len(payload), payload) if reply else b" %d\r\n%s\r\n" % (len(payload), payload)
    assert msg_tail(data, start, reply) == expected


def test_the_fields_of_a_plain_envelope_with_a_reply():
    data = encode(Envelope("a.b", b"xyz", reply="_INBOX.q.1"))
    assert plain_fields(data) == (b"a.b", b"_INBOX.q.1", len(data) - 3)
    assert plain_fields(data[:-14]) is None  # the reply cut short
