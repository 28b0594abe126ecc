"""Fuzz target: the HTTP gateway's llhttp path answers every input exactly as h11 alone would.

Each input drives two pure :class:`HttpConnection` in memory, one reading
plain whole requests with llhttp (:mod:`fyrehose.gateways.http.whole_request`,
h11 the rest), one reading everything with h11, with small limits (a 200-byte
head, 40-byte bodies) so that inputs cross them.  The first byte chooses
where the rest is cut into reads (at most three cuts) and whether each read's
publishes are confirmed, failed or left waiting until the next read.
Oracles: nothing raises; both write the same bytes, hand out the same
payloads, close for the same reason and count the same.
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import instrumented, main  # noqa: E402

with instrumented():
    from fyrehose.gateways.drivers.http.gateway import HttpGateway, HttpSettings
    from fyrehose.gateways.http.connection import HttpConnection
    from fyrehose.gateways.http.whole_request import WholeRequestReader
    from fyrehose.gateways.requests import Publish
    from fyrehose.subjects.interest import LocalInterest

PLAIN = b"POST /v1/publish/fuzz.a HTTP/1.1\r\nHost: fuzz\r\nContent-Length: 5\r\n\r\nhello"
SEEDS = [
    b"\x00" + PLAIN,
    b"\x00" + PLAIN + PLAIN,
    b"\x10" + PLAIN + PLAIN.replace(b"Host: fuzz\r\n", b""),
    b"\x25" + PLAIN.replace(b"1.1", b"1.0") + PLAIN,
    b"\x03" + PLAIN.replace(b"Content-Length: 5", b"Transfer-Encoding: chunked").replace(b"hello", b"5\r\nhello\r\n0\r\n\r\n"),
    b"\x40" + b"HEAD /v1/publish/fuzz.a HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n" + PLAIN,
    b"\x81" + PLAIN.replace(b"5\r\n\r\nhello", b"41\r\n\r\n" + b"x" * 41),
    b"\x02" + PLAIN.replace(b"fuzz.a", b"fuzz%2Ea%FF") + PLAIN.replace(b"Host: fuzz", b"Host: fuzz\r\nConnection: close"),
]


class Deployment:
    """The router's state a connection reads: nobody subscribes elsewhere."""

    position = 0

    def __init__(self) -> None:
        self.interest = LocalInterest("fuzz")

    def subscribers_elsewhere(self, subject: str) -> int:
        return 0


def drive(llhttp: bool, reads: list[bytes], answers: list[int]) -> tuple:
    """Feed the reads; after each, confirm (1), fail (2) or leave waiting (0) what was asked."""
    settings = HttpSettings(backbone="fuzz:1", max_head=200, max_message=40)
    connection = HttpConnection(HttpGateway(settings), Deployment(), 0.0, llhttp=llhttp)
    output, published, waiting, seq = [], [], [], 0
    for index, data in enumerate(reads):
        connection.receive(data, float(index))
        while True:
            waiting += [request for request in connection.requests if isinstance(request, Publish)]
            connection.requests.clear()
            output.append(connection.outbox.take())
            if not waiting or answers[index] == 0:
                break
            request = waiting.pop(0)
            published.append(request.payloads)
            if answers[index] == 1:
                seq += 1
                connection.published(request.token, [seq])
            else:
                connection.failed(request.token, "no CONFIRM")
    return b"".join(output), published, connection.outbox.closing, sorted(connection.stats.items())


def check(data: bytes) -> None:
    if not data:
        return
    choice, rest = data[0], data[1:]
    cuts = sorted({len(rest) * ((choice >> shift) & 3) // 4 for shift in (0, 2, 4) if (choice >> shift) & 3})
    reads = [piece for piece in (rest[a:b] for a, b in zip([0, *cuts], [*cuts, len(rest)])) if piece]
    answers = [(choice >> 6) % 3 if index % 2 else 1 for index in range(len(reads))]
    assert drive(True, reads, answers) == drive(False, reads, answers)
    WholeRequestReader(200, 40).read(rest)  # the reader alone, on the whole input: returns or declines


if __name__ == "__main__":
    main(check, SEEDS)
