"""Fuzz target: a NATS client's forged CONNECT credentials and operations at a gateway with --users.

The input is what a client sends after INFO.  The connection logs it in
through the users file's rights (the slow password check stood in for by its
answer: only ``alice``/``secret`` is a credential).  Invariants: it never
raises; nothing is published before a CONNECT proved ``alice``, and then only
to subjects within her publish rights; a client refused a login is told
``-ERR 'Authorization Violation'`` last and closed, and a client not
logged in has no subscription.
"""
from __future__ import annotations

import os
import sys
from collections import Counter

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import instrumented, main  # noqa: E402

with instrumented():
    from fyrehose.gateways.access.login import Access, Login
    from fyrehose.gateways.access.permissions import Permissions
    from fyrehose.gateways.access.users import Entry, Password, User, UsersFile
    from fyrehose.gateways.liveness import NatsLiveness
    from fyrehose.gateways.nats.connection import NatsConnection, NatsRoutes, server_info
    from fyrehose.gateways.requests import Publish, Verify
    from fyrehose.subjects.envelope import decode
    from fyrehose.subjects.interest import LocalInterest

ALICE = User("alice", Permissions.of(["orders.>", "_INBOX.>"], ["orders.audit"]), Permissions.of(["orders.>"]))
USERS = UsersFile({"alice": Entry(ALICE), "bob": Entry(User("bob"))})
VIOLATION = b"-ERR 'Authorization Violation'\r\n"

SEEDS = [
    b'CONNECT {"user":"alice","pass":"secret","verbose":true}\r\nPUB orders.x 1\r\nx\r\nPUB other 0\r\n\r\nPING\r\n',
    b'CONNECT {"user":"alice","pass":"wrong"}\r\nPUB orders.x 0\r\n\r\n',
    b'CONNECT {"auth_token":"fh_0011223344556677_abc","user":null,"pass":""}\r\nSUB orders.> 1\r\n',
    b'CONNECT {"user":["alice"],"pass":{"x":1},"account":"a"}\r\nPING\r\n',
    b"PUB orders.x 1\r\nx\r\nSUB > 1\r\nPING\r\n",
    b'CONNECT {"user":"alice","pass":"secret"}\r\nSUB orders.secret q 2\r\nHPUB orders.audit 12 12\r\nNATS/1.0\r\n\r\n\r\n',
]


class _Deployment:
    def __init__(self) -> None:
        self.interest = LocalInterest("fuzz")
        self.position = 0

    def subscribers_elsewhere(self, subject: str) -> int:
        return 0


def _verify(credential: object) -> User | None:
    return ALICE if credential == Password("alice", "secret") else None


def check(data: bytes) -> None:
    routes = NatsRoutes(Counter())
    login = Login(Access(USERS), "127.0.0.1")
    connection = NatsConnection(routes, _Deployment(), Counter(), info=server_info("F", "h", 1), peer="127.0.0.1:9",
                                liveness=NatsLiveness(0.0), login=login)
    out = b""
    for start in range(0, len(data), 7):  # in pieces, as TCP may hand them over
        connection.receive(data[start:start + 7], 1.0)
        while connection.requests:
            requests, connection.requests[:] = connection.requests[:], []
            for request in requests:
                if isinstance(request, Verify):
                    connection.verified(request.token, _verify(request.credential))
                    continue
                assert isinstance(request, Publish)
                assert login.logged_in and login.name == "alice", "published without proving alice"
                for payload in request.payloads:
                    subject = decode(payload).subject
                    assert ALICE.publish.permits(subject), f"published outside alice's rights: {subject!r}"
                connection.published(request.token, list(range(len(request.payloads))))
        out += connection.outbox.take()
    if VIOLATION in out:
        assert out.endswith(VIOLATION) and connection.outbox.closing is not None
    if not login.logged_in:
        assert not connection.subscriptions, "subscribed without logging in"


if __name__ == "__main__":
    main(check, SEEDS)
