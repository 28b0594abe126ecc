"""Fuzz target: the Redis gateway's AUTH, HELLO and ACL arguments, forged, before and after a login.

The input is cut into commands (``\\n``) of arguments (``\\x00``), the first
of each being AUTH, HELLO, ACL, PUBLISH, SUBSCRIBE or PSUBSCRIBE by its first
byte; each verification the connection asks for is answered (accepted or
refused by the input's last byte, without hashing).  The invariants: no
exception, exactly one well-formed RESP reply per command (two subscriptions
answer one each), nothing published or subscribed before a login, and the
connection neither paused nor busy once every answer is in.
"""
from __future__ import annotations

import os
import sys
from collections import Counter

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import instrumented, main  # noqa: E402

with instrumented():
    import hiredis

    from fyrehose.gateways.access.login import Access, Login
    from fyrehose.gateways.access.permissions import Permissions
    from fyrehose.gateways.access.users import Entry, User, UsersFile
    from fyrehose.gateways.redis.connection import RedisConnection, RedisRoutes
    from fyrehose.gateways.requests import Publish, Verify
    from fyrehose.subjects.interest import LocalInterest

NAMES = (b"AUTH", b"HELLO", b"ACL", b"PUBLISH", b"auth", b"hello")
ALICE = User("alice", Permissions.of(["news.>"]), Permissions.of(["news.*"], ["news.secret"]))
# a stored hash that is never computed here: the fuzzer answers each Verify itself
USERS = UsersFile({"alice": Entry(ALICE, "scrypt$16384$8$1$AAAAAAAAAAA$" + "A" * 43)})
SEEDS = [
    b"\x00alice\x00secret\n\x01" + b"3\x00AUTH\x00alice\x00secret\x00SETNAME\x00me\n\x02WHOAMI\x01",
    b"\x00secret\n\x013\x00AUTH\x00alice\n\x01x\n\x0103\n\x02WHOAMI\x00x\x00",
    b"\x01\x00AUTH\x00a\x00b\x00AUTH\x00c\x00d\x00SETNAME\x00a b\n\x03news.a\x00x\x01",
]


class Deployment:
    def __init__(self) -> None:
        self.interest = LocalInterest("fuzz")
        self.position = 0

    def subscribers_elsewhere(self, subject: str) -> int:
        return 0


def commands(data: bytes) -> list[list[bytes]]:
    out = []
    for line in data.split(b"\n")[:32]:
        if not line:
            continue
        args = line[1:].split(b"\x00")[:12]
        out.append([NAMES[line[0] % len(NAMES)], *args])
    return out


def check(data: bytes) -> None:
    accept = bool(data) and data[-1] & 1
    access = Access(USERS, Counter())
    login = Login(access, "10.1.2.3")
    connection = RedisConnection(RedisRoutes(), Deployment(), Counter(), login=login)
    sent = commands(data)
    out = b""
    published = 0
    for command in sent:
        connection.receive(b"*%d\r\n" % len(command) + b"".join(b"$%d\r\n%s\r\n" % (len(arg), arg) for arg in command), 0.0)
        while connection.requests:
            requests, connection.requests[:] = list(connection.requests), []
            for request in requests:
                if isinstance(request, Verify):
                    assert isinstance(request.credential.password, str)
                    connection.verified(request.token, ALICE if accept else None)
                else:
                    assert isinstance(request, Publish) and login.logged_in, "published before a login"
                    published += len(request.payloads)
                    connection.published(request.token, list(range(len(request.payloads))))
        out += connection.outbox.take()
        if connection.outbox.closing is not None:
            break
    else:
        reader = hiredis.Reader()
        reader.feed(out)
        replies = []
        while (reply := reader.gets()) is not False:
            replies.append(reply)
        assert len(replies) == len(sent), (sent, out)
    assert not connection.paused and not connection.busy
    assert published <= sum(command[0] == b"PUBLISH" for command in sent)


if __name__ == "__main__":
    main(check, SEEDS)
