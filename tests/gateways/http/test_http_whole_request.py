"""llhttp reads plain whole requests, h11 the rest: a connection answers every input exactly as h11 alone would.

h11 is the oracle: one :class:`HttpConnection` reads with llhttp where it can
(:mod:`fyrehose.gateways.http.whole_request`), a second reads only with h11;
both get the same input, split at the same places, and their publishes are
confirmed (or failed) at the same moments.  They must write the same bytes,
hand out the same payloads, close for the same reason and count the same.
"""
from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fyrehose.gateways.drivers.http.gateway import HttpGateway
from fyrehose.gateways.http.connection import HttpConnection
from fyrehose.gateways.http.settings import HttpSettings
from fyrehose.gateways.http.whole_request import WholeRequestReader
from fyrehose.gateways.requests import Publish

from gateway_support import Deployment

MAX_HEAD = 200  # small limits, so that generated requests cross them
MAX_MESSAGE = 40


def connection(llhttp: bool) -> HttpConnection:
    settings = HttpSettings(backbone="127.0.0.1:1", max_head=MAX_HEAD, max_message=MAX_MESSAGE)
    return HttpConnection(HttpGateway(settings), Deployment(), 0.0, llhttp=llhttp)


def drive(llhttp: bool, chunks: list[bytes], answers: list[int]) -> tuple:
    """Feed the chunks; after each, confirm (1), fail (2) or leave waiting (0) what is asked, as a driver would."""
    conn = connection(llhttp)
    output: list[bytes] = []
    published: list[list[bytes]] = []
    waiting: list[Publish] = []
    seq = 0
    for index, chunk in enumerate(chunk for chunk in chunks if chunk):  # the driver never feeds an empty read
        conn.receive(chunk, float(index))
        answer = answers[index % len(answers)] if answers else 1
        while True:
            waiting += [request for request in conn.requests if isinstance(request, Publish)]
            conn.requests.clear()
            output.append(conn.outbox.take())
            if not waiting or answer == 0:
                break
            request = waiting.pop(0)
            published.append(request.payloads)
            if answer == 1:
                seq += 1
                conn.published(request.token, [seq])
            else:
                conn.failed(request.token, "no CONFIRM")
    return b"".join(output), published, conn.outbox.closing, sorted(conn.stats.items())


def same(chunks: list[bytes], answers: list[int]) -> None:
    assert drive(True, chunks, answers) == drive(False, chunks, answers)


# ---------------------------------------------------------------- generated requests, near and across the edges

METHODS = [b"POST", b"GET", b"PUT", b"HEAD", b"CONNECT", b"OPTIONS", b"post", b"P@ST", b""]
TARGETS = [b"/v1/publish/a.b", b"/v1/publish/bench.http", b"/v1/publish/a%2Eb", b"/v1/publish/a%FF", b"/v1/publish/",
           b"/v1/publish/a..b", b"/v1/publish/a b", b"/v1/publish/a*", b"/v1/publish/\xc3\xa9", b"/healthz",
           b"/v1/publish/a?x=1", b"/v1/publish/a#f", b"http://h/v1/publish/a", b"*", b"/v1/publish/" + b"x" * 150]
VERSIONS = [b"HTTP/1.1", b"HTTP/1.0", b"HTTP/2.0", b"HTTP/1.1 ", b"http/1.1", b"HTTP/1.10"]
HEADERS = [b"Host: a", b"host:a", b"Host:  a  ", b"Host: \tb", b"Host:", b"Host : a", b" Host: a", b"Host: a\x01",
           b"Host: a\x7f", b"Host: \xff", b"X-A: b\r\n c", b"X-Long: " + b"v" * 120, b"Connection: close",
           b"Connection: keep-alive", b"Transfer-Encoding: chunked", b"Expect: 100-continue", b"Upgrade: websocket",
           b"X\x00: y", b"X-\xe9: y", b": empty", b"Content-Type: text/plain", b"TE: trailers", b"Accept: */*"]
LINE_ENDS = [b"\r\n", b"\n", b"\r"]


def mostly(plain, others: list):
    """``plain`` four times in five, else any of ``others``: most requests are plain but for a detail or two."""
    return st.integers(0, 4).flatmap(lambda pick: st.sampled_from(others) if pick == 0 else st.just(plain))


@st.composite
def requests(draw) -> bytes:
    end = draw(mostly(b"\r\n", LINE_ENDS))
    body = draw(st.binary(max_size=MAX_MESSAGE + 5))
    length = draw(mostly(str(len(body)).encode(), [
        b"0", b"1", b"+3", b"-1", b"3 ", b"0x3", b"99999999999999999999", str(MAX_MESSAGE + 1).encode(), b""]))
    headers = draw(mostly([], [[header] for header in HEADERS] + [[HEADERS[0], HEADERS[1]]]))
    lengths = draw(mostly([length], [[], [length, length], [length, b"7"]]))
    headers = headers + [b"Content-Length: " + value for value in lengths]
    if draw(st.integers(0, 5)):
        headers.insert(draw(st.integers(0, len(headers))), b"Host: h")
    line = b" ".join([draw(mostly(b"POST", METHODS)), draw(mostly(b"/v1/publish/a.b", TARGETS)),
                      draw(mostly(b"HTTP/1.1", VERSIONS))])
    return line + end + b"".join(header + end for header in headers) + end + body


@st.composite
def inputs(draw) -> tuple[list[bytes], list[int]]:
    """One to three requests, each its own read or split anywhere; sometimes bytes flipped."""
    parts = draw(st.lists(requests(), min_size=1, max_size=3))
    if draw(st.integers(0, 2)) == 0:  # a read holds several (pipelined) or a request is cut
        data = b"".join(parts)
        cuts = sorted(draw(st.lists(st.integers(0, len(data)), max_size=4)))
        parts = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)])]
    if draw(st.integers(0, 4)) == 0:
        index = draw(st.integers(0, len(parts) - 1))
        part = bytearray(parts[index])
        if part:
            part[draw(st.integers(0, len(part) - 1))] = draw(st.integers(0, 255))
        parts[index] = bytes(part)
    return parts, draw(st.lists(st.sampled_from([0, 1, 1, 2]), max_size=4))


@settings(max_examples=1500, deadline=None, suppress_health_check=list(HealthCheck))
@given(inputs())
def test_a_connection_reading_with_llhttp_answers_as_h11_alone(case):
    same(*case)


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.binary(max_size=80), min_size=1, max_size=4), st.lists(st.sampled_from([0, 1, 2]), max_size=3))
def test_any_bytes_get_the_same_answers(chunks, answers):
    same(chunks, answers)


# ---------------------------------------------------------------- what llhttp takes, and what it leaves to h11

PLAIN = b"POST /v1/publish/a.b HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\nhi"


def test_a_plain_publish_is_read_by_llhttp_and_answered_with_h11s_bytes():
    reader = WholeRequestReader(MAX_HEAD, MAX_MESSAGE)
    assert reader.read(PLAIN) is not None
    conn = connection(True)
    conn.receive(PLAIN, 0.0)
    assert conn.http.their_state.__name__ == "IDLE"  # h11 never saw it
    output, published, closing, _ = drive(True, [PLAIN, PLAIN], [1])
    assert output == drive(False, [PLAIN, PLAIN], [1])[0]
    assert output.count(b"HTTP/1.1 200 OK\r\nserver: fyrehose\r\ncontent-type: application/json\r\n") == 2
    assert len(published) == 2 and closing is None


def test_what_llhttp_leaves_to_h11():
    reader = WholeRequestReader(MAX_HEAD, MAX_MESSAGE)
    for data in (PLAIN + PLAIN,  # pipelined: h11 keeps the second for after the first
                 PLAIN[:-1],  # not whole
                 PLAIN.replace(b"1.1", b"1.0"),
                 PLAIN.replace(b"Host: h\r\n", b""),
                 PLAIN.replace(b"Host: h", b"Host: h\r\nConnection: close"),
                 PLAIN.replace(b"\r\n", b"\n"),
                 PLAIN.replace(b"Content-Length: 2", b"Transfer-Encoding: chunked"),
                 PLAIN.replace(b"2\r\n\r\nhi", b"%d\r\n\r\n%s" % (MAX_MESSAGE + 1, b"x" * (MAX_MESSAGE + 1))),
                 PLAIN.replace(b"Host: h", b"Host: " + b"h" * MAX_HEAD)):
        assert reader.read(data) is None, data
    assert reader.read(PLAIN) is not None  # nothing kept from what it declined
