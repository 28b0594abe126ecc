"""The Redis gateway's logins and rights, on the pure connection: redis-server's replies, byte for byte.

Each reply checked here was read off redis-server 7.0 (an ACL file with the
equivalent users); test_redis_auth_clients.py asks a real one again.
"""
from __future__ import annotations

import base64

import pytest
from hypothesis import given
from hypothesis import strategies as st
from redis_users_support import Client, Deployment, command, users
from wsproto import ConnectionType, WSConnection
from wsproto.events import BytesMessage, Request

from fyrehose.gateways.access.guard import FREE_FAILURES
from fyrehose.gateways.access.login import Access, Login
from fyrehose.gateways.drivers.http.gateway import HttpGateway, HttpSettings
from fyrehose.gateways.http.connection import HttpConnection
from fyrehose.gateways.redis import rights
from fyrehose.gateways.redis.connection import RedisRoutes
from fyrehose.gateways.requests import Publish, Verify
from fyrehose.subjects.envelope import Envelope

OK = b"+OK\r\n"
NOAUTH = b"-NOAUTH Authentication required.\r\n"
WRONGPASS = b"-WRONGPASS invalid username-password pair or user is disabled.\r\n"
NOPERM = b"-NOPERM this user has no permissions to access one of the channels used as arguments\r\n"
HELLO_NOAUTH = (b"-NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO AUTH "
                b"<user> <pass> option can be used to authenticate the client and select the RESP protocol "
                b"version at the same time\r\n")
NO_PASSWORD = (b"-ERR AUTH <password> called without any password configured for the default user. Are you sure "
               b"your configuration is correct?\r\n")

SPEC = {
    "alice": {"password": "secret", "publish": {"allow": ["news.sports", "orders.>"]},
              "subscribe": {"allow": ["news.*", "weather"], "deny": ["news.secret"]}},
    "bob": {"password": "pw"},
    "default": {"password": "dflt", "publish": {"allow": []}, "subscribe": {"allow": []}},
    "guest": {"publish": {"allow": []}, "subscribe": {"allow": ["public.>"]}},
}


def access(anonymous: str | None = None) -> Access:
    """A fresh users file each time: no credential is remembered from another test."""
    return Access(users(SPEC, anonymous))


def logged_in(name: str = "alice", password: bytes = b"secret", **options) -> Client:
    client = Client(access(), **options)
    assert client.send(command(b"AUTH", name.encode(), password)) == OK
    return client


def hello_fields(reply: bytes) -> bool:
    return reply.startswith((b"%7\r\n", b"*14\r\n")) and b"$6\r\nserver\r\n$8\r\nfyrehose\r\n" in reply


# ---------------------------------------------------------------- without --users: redis-server without a password

def test_without_users_auth_answers_as_redis_server_without_a_password():
    client = Client(Access(None))
    assert client.send(command(b"AUTH", b"anything")) == NO_PASSWORD
    assert client.send(command(b"AUTH", b"default", b"anything")) == OK  # the default user is nopass
    assert client.send(command(b"AUTH", b"alice", b"secret")) == WRONGPASS  # no other user exists
    assert client.send(command(b"AUTH", b"a", b"b", b"c")) == b"-ERR syntax error\r\n"
    assert client.send(command(b"AUTH")) == b"-ERR wrong number of arguments for 'auth' command\r\n"
    assert hello_fields(client.send(command(b"HELLO", b"3", b"AUTH", b"default", b"x")))
    assert client.send(command(b"HELLO", b"3", b"AUTH", b"alice", b"x")) == WRONGPASS
    assert client.send(command(b"ACL", b"WHOAMI")) == b"$7\r\ndefault\r\n"
    assert client.send(command(b"PUBLISH", b"a", b"b")) == b":0\r\n"
    assert client.connection.requests == [] and not client.verifies


# ---------------------------------------------------------------- before a login

def test_before_a_login_only_auth_hello_and_quit_run():
    client = Client(access())
    assert client.send(command(b"PING")) == NOAUTH
    assert client.send(command(b"PUBLISH", b"news.sports", b"x")) == NOAUTH
    assert client.send(b"PUBLISH news.sports x\r\n") == NOAUTH
    assert client.send(command(b"SUBSCRIBE", b"news.a")) == NOAUTH
    assert client.send(command(b"PSUBSCRIBE", b"*")) == NOAUTH
    assert client.send(command(b"UNSUBSCRIBE")) == NOAUTH
    assert client.send(command(b"GET", b"news.a")) == NOAUTH
    assert client.send(command(b"ACL", b"WHOAMI")) == NOAUTH
    assert client.send(command(b"HELLO", b"3")) == HELLO_NOAUTH
    assert client.send(command(b"HELLO")) == HELLO_NOAUTH
    # what redis-server checks before the login: the command, its arity, an ACL subcommand
    assert client.send(command(b"FOO")).startswith(b"-ERR unknown command 'foo'")
    assert client.send(command(b"PUBLISH", b"x")) == b"-ERR wrong number of arguments for 'publish' command\r\n"
    assert client.send(command(b"ACL", b"WHOAMI", b"x")) == (
        b"-ERR wrong number of arguments for 'acl|whoami' command\r\n")
    assert client.send(command(b"ACL", b"LIST")).startswith(b"-ERR unknown subcommand 'LIST'.")
    assert client.published == [] and not client.routes.channels and not client.routes.patterns
    assert client.access.stats["commands refused before a login"] == 10
    assert client.send(command(b"QUIT")) == OK and client.connection.outbox.closing == "QUIT"


def test_an_anonymous_user_needs_no_login_and_has_its_rights():
    client = Client(access("guest"))
    assert client.send(command(b"ACL", b"WHOAMI")) == b"$5\r\nguest\r\n"
    assert hello_fields(client.send(command(b"HELLO", b"2")))
    assert client.send(command(b"PUBLISH", b"public.x", b"y")) == NOPERM
    assert client.send(command(b"SUBSCRIBE", b"public.x")) == b"*3\r\n$9\r\nsubscribe\r\n$8\r\npublic.x\r\n:1\r\n"


# ---------------------------------------------------------------- logging in

def test_auth_with_user_and_password_and_with_the_password_of_default():
    client = Client(access())
    assert client.send(command(b"AUTH", b"alice", b"secret")) == OK
    assert client.send(command(b"ACL", b"WHOAMI")) == b"$5\r\nalice\r\n"
    assert client.send(command(b"AUTH", b"dflt")) == OK  # one argument: the user named default
    assert client.send(command(b"ACL", b"WHOAMI")) == b"$7\r\ndefault\r\n"
    assert client.send(command(b"AUTH", b"bob", b"wrong")) == WRONGPASS
    assert client.send(command(b"ACL", b"WHOAMI")) == b"$7\r\ndefault\r\n"  # a failed AUTH changes nothing
    assert client.access.stats["logins accepted"] == 2 and client.access.stats["logins refused"] == 1


def test_wrong_user_and_wrong_password_are_the_same_refusal():
    for name, password in ((b"alice", b"nope"), (b"nobody", b"secret"), (b"\xff\xfe", b"\xc3"), (b"bob", b"")):
        client = Client(access())
        assert client.send(command(b"AUTH", name, password)) == WRONGPASS
        assert client.send(command(b"PING")) == NOAUTH
        assert client.warnings == ["login refused"]  # the NOAUTH's line: not within the same second


def test_a_login_is_verified_off_the_loop_and_the_commands_after_it_wait():
    client = Client(access())
    out = client.send(command(b"AUTH", b"alice", b"secret") + command(b"PUBLISH", b"news.sports", b"goal")
                      + command(b"PING"), verify=False)
    assert out == b"" and client.published == []
    (request,) = client.verifies
    assert isinstance(request, Verify) and client.connection.paused and client.connection.busy
    client.connection.receive(command(b"PUBLISH", b"news.sports", b"more"), 0.0)  # read anyway: still waits
    assert client.settle() == b""
    client.connection.verified(request.token, request.users.verify(request.credential))
    assert client.settle() == OK + b":0\r\n+PONG\r\n:0\r\n"
    assert [message.data for message in client.published] == [b"goal", b"more"]
    assert not client.connection.paused and not client.connection.busy


def test_nothing_sent_after_a_refused_login_reaches_the_backbone():
    client = Client(access())
    out = client.send(command(b"AUTH", b"alice", b"bad") + command(b"PUBLISH", b"news.sports", b"x")
                      + command(b"SUBSCRIBE", b"news.a"), verify=False)
    assert out == b""
    (request,) = client.verifies
    client.connection.verified(request.token, None)
    assert client.settle() == WRONGPASS + NOAUTH + NOAUTH
    assert client.published == [] and not client.routes.channels


def test_a_credential_verified_before_is_accepted_without_hashing():
    shared = access()
    assert Client(shared).send(command(b"AUTH", b"alice", b"secret")) == OK
    client = Client(shared)
    assert client.send(command(b"AUTH", b"alice", b"secret"), verify=False) == OK and not client.verifies


def test_failed_logins_are_throttled_per_address_without_hashing():
    shared = access()
    for _ in range(FREE_FAILURES + 1):  # the free failures, and one more: the address is slowed
        assert Client(shared, address="10.9.9.9").send(command(b"AUTH", b"alice", b"bad")) == WRONGPASS
    throttled = Client(shared, address="10.9.9.9")
    assert throttled.send(command(b"AUTH", b"alice", b"secret"), verify=False) == WRONGPASS  # even the right one
    assert not throttled.verifies and shared.stats["logins throttled"] == 1
    other = Client(shared, address="10.9.9.10")
    assert other.send(command(b"AUTH", b"alice", b"secret")) == OK


def test_a_client_certificate_names_its_user():
    client = Client(access(), certificate="alice")
    assert client.send(command(b"ACL", b"WHOAMI")) == b"$5\r\nalice\r\n"
    assert client.send(command(b"PUBLISH", b"news.sports", b"x")) == b":0\r\n"
    stranger = Client(access(), certificate="mallory")
    assert stranger.send(command(b"PING")) == NOAUTH


# ---------------------------------------------------------------- HELLO

def test_hello_auth_logs_in_and_switches_protocol():
    client = Client(access())
    reply = client.send(command(b"HELLO", b"3", b"AUTH", b"alice", b"secret", b"SETNAME", b"me"))
    assert reply.startswith(b"%7\r\n") and hello_fields(reply)
    assert client.connection.resp3 and client.connection.name == b"me"
    assert client.send(command(b"ACL", b"WHOAMI")) == b"$5\r\nalice\r\n"


def test_hello_options_run_in_order_as_redis_server_runs_them():
    client = Client(access())
    # a name set before a refused AUTH stays; the version does not change
    assert client.send(command(b"HELLO", b"3", b"SETNAME", b"n", b"AUTH", b"alice", b"bad")) == WRONGPASS
    assert client.connection.name == b"n" and not client.connection.resp3
    client = Client(access())  # an AUTH that succeeded before a bad option stays
    assert client.send(command(b"HELLO", b"3", b"AUTH", b"alice", b"secret", b"FOO")) == (
        b"-ERR Syntax error in HELLO option 'FOO'\r\n")
    assert client.send(command(b"ACL", b"WHOAMI")) == b"$5\r\nalice\r\n" and not client.connection.resp3
    client = Client(access())  # two AUTHs: each checked, the last one counts
    reply = client.send(command(b"HELLO", b"2", b"AUTH", b"alice", b"secret", b"AUTH", b"bob", b"pw"))
    assert hello_fields(reply) and client.send(command(b"ACL", b"WHOAMI")) == b"$3\r\nbob\r\n"
    assert client.send(command(b"HELLO", b"3", b"AUTH", b"alice")) == b"-ERR Syntax error in HELLO option 'AUTH'\r\n"


@pytest.mark.parametrize("version", [b"x", b"03", b"+3", b" 3", b"3 ", b"", b"99999999999999999999", b"0x3"])
def test_hello_versions_that_are_not_integers(version):
    assert Client(access()).send(command(b"HELLO", version)) == (
        b"-ERR Protocol version is not an integer or out of range\r\n")


@pytest.mark.parametrize("version", [b"0", b"1", b"4", b"-3", b"9223372036854775807"])
def test_hello_versions_out_of_range(version):
    assert Client(access()).send(command(b"HELLO", version)) == b"-NOPROTO unsupported protocol version\r\n"


@given(st.binary(max_size=22))
def test_redis_integers_are_read_as_string2ll_reads_them(text):
    value = rights.long_long(text)
    plain = text.isascii() and text.decode().lstrip("-").isdigit() and not text.startswith(b"-0") \
        and not (text.startswith(b"0") and len(text) > 1) and len(text.lstrip(b"-")) > 0
    if value is None:
        assert not plain or not -(1 << 63) <= int(text) < 1 << 63
    else:
        assert plain and value == int(text)


# ---------------------------------------------------------------- rights

def test_publish_outside_the_rights_is_refused_and_never_published():
    client = logged_in()
    assert client.send(command(b"PUBLISH", b"news.sports", b"a")) == b":0\r\n"
    assert client.send(command(b"PUBLISH", b"orders.eu.1", b"b")) == b":0\r\n"
    assert client.send(command(b"PUBLISH", b"news.weather", b"c")) == NOPERM
    assert client.send(b"PUBLISH orders x\r\n") == NOPERM
    assert client.send(command(b"PUBLISH", b"a b", b"odd")) == NOPERM  # _CHAN.YSBi: not granted
    assert [message.subject for message in client.published] == ["news.sports", "orders.eu.1"]
    assert client.access.stats["publishes refused"] == 3
    assert client.warnings == ["PUBLISH refused to user alice (NOPERM)"]  # one line per second per address


def test_pipelined_publishes_keep_their_order_around_a_refusal():
    client = logged_in()
    out = client.send(command(b"PUBLISH", b"news.sports", b"1") + command(b"PUBLISH", b"nope", b"2")
                      + command(b"PUBLISH", b"news.sports", b"3"))
    assert out == b":0\r\n" + NOPERM + b":0\r\n"
    assert [message.data for message in client.published] == [b"1", b"3"]


def test_subscribe_is_refused_whole_when_one_channel_is_outside():
    client = logged_in()
    assert client.send(command(b"SUBSCRIBE", b"news.a", b"weather", b"news.secret")) == NOPERM
    assert not client.routes.channels and not client.connection.channels  # nothing subscribed, no interest
    assert client.send(command(b"SUBSCRIBE", b"news.a", b"weather")) == (
        b"*3\r\n$9\r\nsubscribe\r\n$6\r\nnews.a\r\n:1\r\n*3\r\n$9\r\nsubscribe\r\n$7\r\nweather\r\n:2\r\n")
    assert client.send(command(b"SUBSCRIBE", b"")) == NOPERM  # no subject: only for users with every right


def test_psubscribe_patterns_are_checked_as_redis_checks_them_against_channel_rules():
    client = logged_in()
    assert client.send(command(b"PSUBSCRIBE", b"news.*")) == (  # literally one of the allow patterns
        b"*3\r\n$10\r\npsubscribe\r\n$6\r\nnews.*\r\n:1\r\n")
    assert client.send(command(b"PSUBSCRIBE", b"news.a")) == (  # no glob character: the channel news.a
        b"*3\r\n$10\r\npsubscribe\r\n$6\r\nnews.a\r\n:2\r\n")
    for refused in (b"news.a*", b"news.?", b"*", b"weather*", b"news.secret", b"n[e]ws.*", b"news.\\*"):
        assert client.send(command(b"PSUBSCRIBE", refused)) == NOPERM, refused
    assert client.send(command(b"PSUBSCRIBE", b"news.a", b"news.b*")) == NOPERM  # whole command
    bob = logged_in("bob", b"pw")
    assert bob.send(command(b"PSUBSCRIBE", b"*")) == b"*3\r\n$10\r\npsubscribe\r\n$1\r\n*\r\n:1\r\n"


def test_deliveries_are_asked_per_subject():
    routes = RedisRoutes()
    alice = logged_in(routes=routes)
    bob = logged_in("bob", b"pw", routes=routes)
    assert alice.send(command(b"PSUBSCRIBE", b"news.*"))
    assert bob.send(command(b"PSUBSCRIBE", b"news.*"))
    for seq, subject in enumerate(("news.a", "news.a.b", "news.secret", "news.b"), 1):
        routes.route(seq, Envelope(subject, b"m"))
    got = alice.settle()
    assert got.count(b"pmessage") == 2 and b"news.a.b" not in got and b"news.secret" not in got
    assert bob.settle().count(b"pmessage") == 4  # every right: the glob's own matches


def test_a_reloaded_users_file_applies_to_connected_clients():
    shared = access()
    routes = RedisRoutes()
    client = Client(shared, routes=routes)
    assert client.send(command(b"AUTH", b"alice", b"secret")) == OK
    assert hello_fields(client.send(command(b"HELLO", b"3")))
    assert client.send(command(b"SUBSCRIBE", b"news.a")).startswith(b">3")
    changed = {**SPEC, "alice": {"password": "new", "publish": {"allow": ["orders.>"]},
                                 "subscribe": {"allow": ["weather"]}}}
    shared.replace(users(changed))
    routes.route(1, Envelope("news.a", b"gone"))
    assert client.settle() == b""  # the right to read news.a is gone: so are its messages
    assert client.send(command(b"PUBLISH", b"news.sports", b"x")) == NOPERM
    assert client.send(command(b"PUBLISH", b"orders.1", b"x")) == b":0\r\n"
    assert Client(shared).send(command(b"AUTH", b"alice", b"secret")) == WRONGPASS  # the old password
    assert Client(shared).send(command(b"AUTH", b"alice", b"new")) == OK
    shared.replace(users({"bob": SPEC["bob"]}))  # alice removed: she may do nothing, still connected
    assert client.send(command(b"PING")) == NOAUTH and client.connection.outbox.closing is None


def test_a_subscribed_resp2_client_hears_noperm_before_the_context_error():
    client = logged_in()
    assert client.send(command(b"SUBSCRIBE", b"news.a")).startswith(b"*3")
    assert client.send(command(b"PUBLISH", b"nope", b"x")) == NOPERM
    assert client.send(command(b"PUBLISH", b"news.sports", b"x")).startswith(b"-ERR Can't execute 'publish'")
    assert client.send(command(b"AUTH", b"bob", b"pw")).startswith(b"-ERR Can't execute 'auth'")


def test_get_reads_a_last_value_only_within_the_subscribe_rights():
    client = logged_in()
    assert client.send(command(b"GET", b"orders.1")) == (
        b"-NOPERM this user has no permissions to access one of the keys used as arguments\r\n")
    assert client.send(command(b"GET", b"weather")).startswith(b"-ERR no cache answered")


# ---------------------------------------------------------------- RESP over WebSocket (/resp)

class RespOverWebSocket:
    """An HTTP connection of the HTTP gateway upgraded to /resp, with a login, driven by wsproto's client side."""

    def __init__(self, shared: Access) -> None:
        """Upgraded with alice's password: the Redis commands go on as alice."""
        self.http = HttpConnection(HttpGateway(HttpSettings(backbone="127.0.0.1:1")), Deployment(), 0.0,
                                   Login(shared, "10.0.0.7"))
        self.ws = WSConnection(ConnectionType.CLIENT)
        basic = base64.b64encode(b"alice:secret")  # the upgrade request logs in (Basic), as the HTTP gateway asks
        self.exchange(self.ws.send(Request(host="gateway", target="/resp",
                                           extra_headers=[(b"authorization", b"Basic " + basic)])))

    def exchange(self, data: bytes) -> list[bytes]:
        self.http.receive(data, 0.0)
        got: list[bytes] = []
        while True:
            written = self.http.outbox.take()
            if written:  # wsproto reads b"" as the connection's end
                self.ws.receive_data(written)
            got += [event.data for event in self.ws.events() if isinstance(event, BytesMessage)]
            requests, self.http.requests[:] = list(self.http.requests), []
            if not requests:
                return got
            for request in requests:
                if isinstance(request, Publish):
                    self.http.published(request.token, [1])
                else:
                    assert isinstance(request, Verify)
                    self.http.verified(request.token, request.users.verify(request.credential))

    def send(self, *args: bytes) -> list[bytes]:
        return self.exchange(self.ws.send(BytesMessage(data=command(*args))))


def test_resp_over_websocket_goes_on_as_the_upgrades_user_and_logs_in_as_on_tcp():
    client = RespOverWebSocket(access())
    assert client.send(b"ACL", b"WHOAMI") == [b"$5\r\nalice\r\n"]
    assert client.send(b"PUBLISH", b"orders", b"x") == [NOPERM]
    assert client.send(b"PSUBSCRIBE", b"news.s*") == [NOPERM]
    assert client.send(b"AUTH", b"bob", b"bad") == [WRONGPASS]
    assert client.send(b"ACL", b"WHOAMI") == [b"$5\r\nalice\r\n"]
    assert client.send(b"HELLO", b"3", b"AUTH", b"bob", b"pw")[0].startswith(b"%7\r\n")
    assert client.send(b"ACL", b"WHOAMI") == [b"$3\r\nbob\r\n"]
    assert client.send(b"PUBLISH", b"orders", b"x") == [b":0\r\n"]


# ---------------------------------------------------------------- redis-server's limits before a login

UNAUTHENTICATED_MULTIBULK = b"-ERR Protocol error: unauthenticated multibulk length\r\n"
UNAUTHENTICATED_BULK = b"-ERR Protocol error: unauthenticated bulk length\r\n"


def test_before_a_login_commands_are_small_and_a_larger_one_closes():
    client = Client(access())
    assert client.send(command(b"PUBLISH", b"news.sports", b"x" * 16384)) == NOAUTH  # the largest argument
    assert client.send(command(b"PING", *[b"x"] * 9)) == b"-ERR wrong number of arguments for 'ping' command\r\n"
    assert client.send(command(b"PING", *[b"x"] * 10)) == UNAUTHENTICATED_MULTIBULK  # 11 in all
    assert client.connection.outbox.closing is not None
    client = Client(access())
    assert client.send(b"*3\r\n$7\r\nPUBLISH\r\n$1\r\na\r\n$16385\r\n") == UNAUTHENTICATED_BULK
    assert client.connection.outbox.closing is not None


def test_after_a_login_or_without_users_larger_commands_are_read():
    big = command(b"PUBLISH", b"news.sports", b"x" * 50_000)
    client = logged_in()
    assert client.send(big) == b":0\r\n"
    assert Client(Access(None)).send(big) == b":0\r\n"
    assert Client(access("guest")).send(command(b"PUBLISH", b"x", b"y" * 20000)) == NOPERM  # anonymous is in


def test_what_is_pipelined_behind_an_auth_is_read_as_after_a_login():
    client = Client(access())
    assert client.send(command(b"AUTH", b"alice", b"secret") + command(b"PUBLISH", b"news.sports", b"x" * 20000)) == (
        OK + b":0\r\n")
    refused = Client(access())  # refused: the limits are back for what it sends next
    assert refused.send(command(b"AUTH", b"alice", b"bad")) == WRONGPASS
    assert refused.send(command(b"PUBLISH", b"a", b"x" * 20000)) == UNAUTHENTICATED_BULK
