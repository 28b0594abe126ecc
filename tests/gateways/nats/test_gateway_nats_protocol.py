"""The NATS gateway's pure part: the incremental client-protocol parser and the encoders."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from fyrehose.gateways.nats import protocol as proto

token = st.text("abcXYZ019_-", min_size=1, max_size=6)
subject = st.lists(token, min_size=1, max_size=4).map(".".join)
sid = st.text("0123456789abc", min_size=1, max_size=5)
payload = st.binary(max_size=60)


def encode(operation) -> bytes:
    if isinstance(operation, proto.Pub):
        reply = f" {operation.reply}" if operation.reply else ""
        if operation.headers is None:
            return f"PUB {operation.subject}{reply} {len(operation.payload)}\r\n".encode() + operation.payload + b"\r\n"
        total = len(operation.headers) + len(operation.payload)
        return (f"HPUB {operation.subject}{reply} {len(operation.headers)} {total}\r\n".encode()
                + operation.headers + operation.payload + b"\r\n")
    if isinstance(operation, proto.Sub):
        queue = f" {operation.queue}" if operation.queue else ""
        return f"sub {operation.subject}{queue} {operation.sid}\r\n".encode()
    if isinstance(operation, proto.Unsub):
        limit = f"\t{operation.max_msgs}" if operation.max_msgs is not None else ""
        return f"UNSUB {operation.sid}{limit}\r\n".encode()
    if isinstance(operation, proto.Connect):
        return b'CONNECT {"verbose":true,"name":"x y"}\r\n'
    return b"PING\r\n" if isinstance(operation, proto.Ping) else b"pong\r\n"


operations = st.one_of(
    st.builds(proto.Pub, subject, st.none() | subject, payload),
    st.builds(proto.Pub, subject, st.none() | subject, payload,
              st.binary(max_size=20).map(lambda extra: b"NATS/1.0\r\nX: " + extra.hex().encode() + b"\r\n\r\n")),
    st.builds(proto.Sub, subject, st.none() | token, sid),
    st.builds(proto.Unsub, sid, st.none() | st.integers(0, 10**6)),
    st.just(proto.Connect({"verbose": True, "name": "x y"})),
    st.just(proto.Ping()),
    st.just(proto.Pong()),
)


def chunks(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({cut % (len(data) + 1) for cut in cuts})
    pieces, start = [], 0
    for point in points + [len(data)]:
        pieces.append(data[start:point])
        start = point
    return pieces


@given(st.lists(operations, max_size=10), st.lists(st.integers(min_value=0), max_size=20))
def test_operations_survive_any_chunking(ops, cuts):
    parser = proto.OperationParser(max_payload=1000)
    out = []
    for piece in chunks(b"".join(encode(op) for op in ops), cuts):
        out.extend(parser.feed(piece))
    assert out == ops


@settings(max_examples=300)
@given(st.lists(st.binary(max_size=40), max_size=8))
def test_garbage_yields_operations_then_at_most_one_error(pieces):
    parser = proto.OperationParser(max_payload=100)
    out = []
    for piece in pieces:
        out.extend(parser.feed(piece))
    errors = [item for item in out if isinstance(item, proto.NatsError)]
    assert len(errors) <= 1
    if errors:
        assert out[-1] is errors[0]
        assert parser.feed(b"PING\r\n") == []


def test_errors_have_the_nats_server_texts():
    assert proto.OperationParser(10).feed(b"PUB a 11\r\n") == [proto.NatsError("Maximum Payload Violation")]
    assert proto.OperationParser(10).feed(b"FOO\r\n") == [proto.NatsError("Unknown Protocol Operation")]
    assert proto.OperationParser(10).feed(b"SUB " + b"a" * 5000) == [proto.NatsError("Maximum Control Line Exceeded")]
    assert proto.OperationParser(10).feed(b"PUB a 2\r\nabc\r\n") == [
        proto.NatsError("Protocol Error: payload not followed by CRLF")]
    assert proto.OperationParser(10).feed(b"CONNECT [1]\r\n")[0].message.startswith("Invalid CONNECT")
    assert proto.OperationParser(10).feed(b"PUB a -1\r\n")[0].message.startswith("Invalid Arguments")
    assert proto.OperationParser(50).feed(b"HPUB a 5 6\r\nXXXXXy\r\n")[0].message.startswith("Protocol Error")


def test_encoders():
    assert proto.msg(b"a.b", b"1", None, b"hi") == b"MSG a.b 1 2\r\nhi\r\n"
    assert proto.msg(b"a.b", b"1", b"_INBOX.x", b"") == b"MSG a.b 1 _INBOX.x 0\r\n\r\n"
    headers = proto.header_block([("Fyrehose-Status", "NOT_FOUND")])
    assert headers == b"NATS/1.0\r\nFyrehose-Status: NOT_FOUND\r\n\r\n"
    frame = proto.hmsg(b"a", b"2", None, headers, b"xy")
    assert frame == b"HMSG a 2 %d %d\r\n" % (len(headers), len(headers) + 2) + headers + b"xy\r\n"
    assert proto.error("it's bad") == b"-ERR 'it\"s bad'\r\n"
    assert proto.info({"max_payload": 5}) == b'INFO {"max_payload":5}\r\n'


def _plain(subject_text: str, size: int, body: bytes) -> bytes:
    return b"PUB " + subject_text.encode("utf-8", "surrogatepass") + b" %d\r\n" % size + body + b"\r\n"


near_plain_pubs = st.one_of(
    st.builds(lambda s, p: _plain(s, len(p), p), subject, payload),  # the plain form
    st.builds(lambda s, p, n: _plain(s, n, p), subject, payload, st.integers(0, 80)),  # a size that lies
    st.builds(lambda s, p: _plain(s, len(p), p), st.text(max_size=8), payload),  # any subject: spaces, non-ASCII
    st.builds(lambda p: b"PUB a 0" + b"0" * 12 + b"%d\r\n" % len(p) + p + b"\r\n", payload),  # many digits
    st.builds(lambda p: b"PUB a %d\r\n" % len(p) + p + b"\n", payload),  # no CR after the payload
    st.builds(lambda s, p: b"PUB " + s.encode() + b" %d\n" % len(p) + p + b"\r\n", subject, payload),  # LF only
    st.builds(lambda n: b"PUB " + b"s" * n + b" 1\r\nx\r\n", st.integers(4080, 4100)),  # about the line limit
    st.sampled_from([b"pub a 1\r\nx\r\n", b"PUB  a 1\r\nx\r\n", b"PUB\ta 1\r\nx\r\n", b"PUB a\t1\r\nx\r\n",
                     b"PUB a -1\r\n\r\n", b"PUB a 1 \r\nx\r\n", b"PUB a r 1\r\nx\r\n", b"PUB a 2000\r\n"]),
)


@settings(max_examples=400, deadline=None)  # a byte at a time: slow from the .py (FYREHOSE_PURE=1)
@given(st.lists(near_plain_pubs, min_size=1, max_size=6), st.lists(operations, max_size=3))
def test_the_one_step_plain_pub_gives_what_the_general_parser_gives(pubs, others):
    """Fed whole, plain PUBs take the one-step path; fed a byte at a time, their control line arrives before their
    payload, which the one-step path leaves to the general parser: both must give the same operations and errors."""
    data = b"".join(pubs) + b"".join(encode(op) for op in others)
    whole = proto.OperationParser(max_payload=1000).feed(data)
    parser = proto.OperationParser(max_payload=1000)
    byte_by_byte = [item for index in range(len(data)) for item in parser.feed(data[index:index + 1])]
    assert whole == byte_by_byte


def test_plain_pub_reads_only_the_plain_form_wholly_received():
    from fyrehose.gateways.nats.pub_scan import plain_pub

    buffer = bytearray(b"PING\r\nPUB a.b 3\r\nabc\r\nPUB c 1\r\n")
    assert plain_pub(buffer, 0, 100, 4096) is None  # not a PUB: the general parser's
    assert plain_pub(buffer, 6, 100, 4096) == ("a.b", b"abc", 22)
    assert plain_pub(buffer, 22, 100, 4096) is None  # its payload has not arrived yet
    assert plain_pub(bytearray(b"PUB a.b 3\r\nabc\r\n"), 0, 2, 4096) is None  # over the limit: the general error
    assert plain_pub(bytearray(b"PUB a.b 3\r\nabc\r\n"), 0, 100, 8) is None  # a control line over the limit too
