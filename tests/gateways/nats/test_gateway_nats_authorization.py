"""The NATS connection with --users, pure: CONNECT's credentials, nats-server's errors, rights, responses, reloads.

No socket: the connection is fed bytes, its Verify requests are answered as the driver would (with the users
file's own slow check), its outbox read byte for byte.
"""
from __future__ import annotations

from collections import Counter

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nats_users_support import users_file

from fyrehose.gateways.access.guard import FREE_FAILURES
from fyrehose.gateways.access.login import Access, Login
from fyrehose.gateways.access.users import Password, Token
from fyrehose.gateways.liveness import NatsLiveness
from fyrehose.gateways.nats.authorization import MAX_RESPONSES, go_quoted
from fyrehose.gateways.nats.connection import MessageFrames, NatsConnection, NatsRoutes, server_info
from fyrehose.gateways.requests import Publish, Verify
from fyrehose.subjects.envelope import Envelope, decode

from gateway_support import Deployment

USERS, TOKENS = users_file()
WITH_GUEST, _ = users_file("bob")
VIOLATION = b"-ERR 'Authorization Violation'\r\n"



class Client:
    """One pure connection, its requests answered at once (verification with the file's own check)."""

    def __init__(self, access: Access, routes: NatsRoutes | None = None, certificate=None, verify=None) -> None:
        self.routes = routes or NatsRoutes(Counter())
        self.verify = verify  # stands in for the file's scrypt check when given
        self.reports: list[str] = []
        self.connection = NatsConnection(self.routes, Deployment(), Counter(), info=server_info("S", "h", 1),
                                         peer="127.0.0.1:5", liveness=NatsLiveness(0.0), login=Login(access, "127.0.0.1"),
                                         certificate=certificate, report=self.reports.append)
        self.info = orjson.loads(self.take()[5:].split(b"\r\n")[0])
        self.published: list[Envelope] = []
        self.verifications = 0

    def take(self) -> bytes:
        return self.connection.outbox.take()

    def feed(self, data: bytes, now: float = 1.0) -> bytes:
        connection = self.connection
        connection.receive(data, now)
        while connection.requests:
            requests, connection.requests[:] = connection.requests[:], []
            for request in requests:
                if isinstance(request, Verify):
                    self.verifications += 1
                    assert connection.paused  # nothing more is read until the verdict
                    verify = self.verify or request.users.verify
                    connection.verified(request.token, verify(request.credential))
                else:
                    assert isinstance(request, Publish)
                    self.published.extend(decode(payload) for payload in request.payloads)
                    connection.published(request.token, list(range(len(request.payloads))))
        return self.take()

    @property
    def closed(self) -> bool:
        return self.connection.outbox.closing is not None


def connect(options: dict) -> bytes:
    return b"CONNECT " + orjson.dumps({"verbose": False} | options) + b"\r\n"


def logged_in(name: str, access: Access | None = None, routes: NatsRoutes | None = None) -> Client:
    client = Client(access or Access(USERS), routes)
    assert client.feed(connect({"user": name, "pass": dict(alice="secret", bob="hunter2", svc="svcpw")[name]})
                       + b"PING\r\n") == b"PONG\r\n"
    return client


def test_info_says_auth_required_unless_there_is_an_anonymous_user():
    assert Client(Access(USERS)).info["auth_required"] is True
    assert "auth_required" not in Client(Access(WITH_GUEST)).info  # nats-server with no_auth_user leaves it out
    plain = NatsConnection(NatsRoutes(Counter()), Deployment(), Counter(), info=server_info("S", "h", 1),
                           peer="127.0.0.1:5", liveness=NatsLiveness(0.0), login=Login(Access(None), "127.0.0.1"))
    assert b"auth_required" not in plain.outbox.take()


@pytest.mark.parametrize("options", [
    {"user": "alice", "pass": "secret"},
    {"user": "alice", "pass": "secret", "auth_token": "ignored when a user is named"},
    {"auth_token": "bob"},
])
def test_good_credentials_log_in_once_verified(options):
    users, tokens = users_file()  # its own: the file remembers what it verified
    options = options | ({"auth_token": tokens["bob"]} if options.get("auth_token") == "bob" else {})
    client = Client(Access(users))
    assert client.feed(connect(options | {"verbose": True}) + b"PING\r\n") == b"+OK\r\nPONG\r\n"
    assert client.verifications == 1 and not client.closed


@pytest.mark.parametrize("options", [
    {"user": "alice", "pass": "wrong"},
    {"user": "nobody", "pass": "secret"},
    {"user": "alice"},
    {"pass": "secret"},
    {"auth_token": "fh_0011223344556677_wrong"},
    {"auth_token": "not one of ours"},
    {},
    {"user": "alice", "pass": "secret", "account": "other"},
    {"user": ["alice"], "pass": "secret"},
    {"user": "alice", "pass": 12},
])
def test_bad_or_missing_credentials_are_an_authorization_violation_then_close(options):
    client = Client(Access(USERS))
    assert client.feed(connect(options) + b"SUB orders.x 1\r\nPUB orders.x 1\r\nx\r\nPING\r\n") == VIOLATION
    assert client.closed and not client.published and not client.connection.subscriptions
    assert client.reports and "refused" in client.reports[0]


@pytest.mark.parametrize("first", [b"PING\r\n", b"SUB orders.x 1\r\n", b"PUB orders.x 1\r\nx\r\n"])
def test_an_operation_before_connect_is_refused_without_an_anonymous_user(first):
    client = Client(Access(USERS))
    assert client.feed(first + b"PING\r\n") == VIOLATION
    assert client.closed and not client.published


def test_the_anonymous_user_serves_a_client_without_credentials_even_before_connect():
    client = Client(Access(WITH_GUEST))
    assert client.feed(b"PUB anything 1\r\nx\r\nPING\r\n") == b"PONG\r\n"  # bob's rights: everything
    assert [message.subject for message in client.published] == ["anything"]
    client = Client(Access(WITH_GUEST))
    assert client.feed(connect({"user": "bob", "pass": "wrong"})) == VIOLATION  # a wrong password is still wrong


def test_nothing_is_read_while_the_credential_is_verified():
    connection = Client(Access(USERS)).connection
    connection.receive(connect({"user": "alice", "pass": "secret"}) + b"PUB orders.x 1\r\nx\r\nPING\r\n", 1.0)
    [verify] = connection.requests
    assert isinstance(verify, Verify) and verify.credential == Password("alice", "secret")
    assert connection.paused and connection.busy and connection.outbox.take() == b""
    connection.requests.clear()
    connection.verified(verify.token + 1, None)  # not the awaited one: ignored
    assert connection.paused
    connection.verified(verify.token, USERS.user("alice"))
    [publish] = connection.requests
    assert isinstance(publish, Publish) and decode(publish.payloads[0]).subject == "orders.x"


def test_a_throttled_address_is_refused_without_a_verification():
    access = Access(USERS)
    for _ in range(FREE_FAILURES + 1):
        assert Client(access).feed(connect({"user": "alice", "pass": "wrong"})) == VIOLATION
    client = Client(access)
    assert client.feed(connect({"user": "alice", "pass": "secret"})) == VIOLATION
    assert client.verifications == 0 and access.stats["logins throttled"] == 1


def test_a_credential_verified_before_is_not_hashed_again():
    access = Access(USERS)
    logged_in("alice", access)
    client = Client(access)
    assert client.feed(connect({"user": "alice", "pass": "secret"}) + b"PING\r\n") == b"PONG\r\n"
    assert client.verifications == 0


def test_the_token_credential_is_handed_over_whole():
    connection = Client(Access(USERS)).connection
    connection.receive(connect({"auth_token": TOKENS["svc"]}), 1.0)
    assert connection.requests[0].credential == Token(TOKENS["svc"])


def test_publishes_outside_the_rights_get_nats_servers_error_and_never_reach_the_backbone():
    client = logged_in("alice")
    answer = client.feed(b"PUB other 1\r\nx\r\nPUB orders.audit 1\r\nx\r\nHPUB other 12 13\r\nNATS/1.0\r\n\r\nx\r\n"
                         b"PUB orders.eu 2\r\nok\r\nPING\r\n")
    assert answer == (b"-ERR 'Permissions Violation for Publish to \"other\"'\r\n"
                      b"-ERR 'Permissions Violation for Publish to \"orders.audit\"'\r\n"
                      b"-ERR 'Permissions Violation for Publish to \"other\"'\r\nPONG\r\n")
    assert [message.subject for message in client.published] == ["orders.eu"]
    assert not client.closed and client.connection.stats is not None


def test_subscriptions_outside_the_rights_get_nats_servers_errors_in_both_forms():
    client = logged_in("alice")
    answer = client.feed(b"SUB other 1\r\nSUB orders.secret.x q 2\r\nSUB > 3\r\nSUB orders.* 4\r\nPING\r\n")
    assert answer == (b"-ERR 'Permissions Violation for Subscription to \"other\"'\r\n"
                      b"-ERR 'Permissions Violation for Subscription to \"orders.secret.x\" using queue \"q\"'\r\n"
                      b"-ERR 'Permissions Violation for Subscription to \">\"'\r\nPONG\r\n")
    assert list(client.connection.subscriptions) == ["4"] and not client.closed


def test_a_subscription_overlapping_a_deny_is_kept_from_the_denied_subjects():
    routes = NatsRoutes(Counter())
    client = logged_in("alice", routes=routes)
    client.feed(b"SUB orders.> 1\r\n")
    assert client.connection.subscriptions["1"].filtered
    for seq, subject in enumerate(["orders.a", "orders.secret.plans", "orders.b"]):
        routes.route(seq, Envelope(subject, b"m"))
    assert client.take() == b"MSG orders.a 1 1\r\nm\r\nMSG orders.b 1 1\r\nm\r\n"


def test_a_responder_may_answer_an_inbox_request_once():
    routes = NatsRoutes(Counter())
    responder = logged_in("svc", routes=routes)  # publish rights: svc.status only
    responder.feed(b"SUB svc.time 1\r\n")
    routes.route(1, Envelope("svc.time", b"now?", reply="_INBOX.abc.1"))
    routes.route(2, Envelope("svc.time", b"now?", reply="orders.elsewhere"))  # not an inbox: no right given
    responder.take()
    answer = responder.feed(b"PUB _INBOX.abc.1 2\r\n12\r\nPUB _INBOX.abc.1 2\r\n12\r\nPUB orders.elsewhere 2\r\n12\r\n"
                            b"PUB _INBOX.never.asked 2\r\n12\r\nPING\r\n")
    assert answer == (b"-ERR 'Permissions Violation for Publish to \"_INBOX.abc.1\"'\r\n"
                      b"-ERR 'Permissions Violation for Publish to \"orders.elsewhere\"'\r\n"
                      b"-ERR 'Permissions Violation for Publish to \"_INBOX.never.asked\"'\r\nPONG\r\n")
    assert [message.subject for message in responder.published] == ["_INBOX.abc.1"]


def test_a_publish_deny_on_the_inbox_switches_responses_off_and_requests_remembered_are_bounded():
    svc = ("pw", (["svc.status"], ["_INBOX.>"]), (None, []))
    users, _ = users_file(rights={"svc": svc})
    routes = NatsRoutes(Counter())
    client = Client(Access(users), routes)
    client.feed(connect({"user": "svc", "pass": "pw"}) + b"SUB svc.time 1\r\n")
    routes.route(1, Envelope("svc.time", b"?", reply="_INBOX.x"))
    assert b"Permissions Violation" in client.feed(b"PUB _INBOX.x 0\r\n\r\n")
    responder = logged_in("svc", routes=routes)
    responder.feed(b"SUB svc.time 1\r\n")
    for index in range(MAX_RESPONSES + 10):
        responder.connection.deliver(index, responder.connection.subscriptions["1"],
                                     MessageFrames.of(Envelope("svc.time", b"?", reply=f"_INBOX.r.{index}")))
    assert len(responder.connection.authorization.responses) == MAX_RESPONSES


def test_a_reload_withdraws_subscriptions_and_refuses_a_removed_user():
    access = Access(USERS)
    routes = NatsRoutes(Counter())
    alice, bob = logged_in("alice", access, routes), logged_in("bob", access, routes)
    alice.feed(b"SUB orders.eu 7\r\nSUB orders.us 8\r\n")
    # bob is gone, alice may subscribe to orders.us only
    narrowed, _ = users_file(rights={"alice": ("secret", (["orders.>"], []), (["orders.us"], []))})
    access.replace(narrowed)
    routes.route(1, Envelope("orders.eu", b"m"))
    routes.route(2, Envelope("orders.us", b"m"))
    assert alice.take() == b"-ERR 'Permissions Violation for Subscription to \"orders.eu\" (sid \"7\")'\r\n" \
                           b"MSG orders.us 8 1\r\nm\r\n"
    assert bob.feed(b"PUB orders.x 0\r\n\r\n") == VIOLATION and bob.closed


def test_the_client_certificate_names_the_user_and_the_connect_credentials_are_not_looked_at():
    client = Client(Access(USERS), certificate=lambda: "svc")
    assert client.feed(connect({"user": "alice", "pass": "wrong"}) + b"PUB svc.status 0\r\n\r\nPING\r\n") \
        == b"PONG\r\n"
    assert client.verifications == 0 and [m.subject for m in client.published] == ["svc.status"]
    stranger = Client(Access(USERS), certificate=lambda: "mallory")
    assert stranger.feed(connect({"user": "alice", "pass": "secret"})) == VIOLATION


def test_go_quoting_of_subjects_in_errors():
    assert go_quoted("a.b") == '"a.b"' and go_quoted('a"b\\c') == '"a\\"b\\\\c"'


JUNK = st.none() | st.booleans() | st.integers(-(2 ** 63), 2 ** 63 - 1) | st.text(max_size=12) | st.lists(st.text(max_size=3), max_size=2) \
    | st.dictionaries(st.text(max_size=3), st.booleans(), max_size=2)


def _alice_only(credential) -> object:
    """The scrypt check stood in for by its answer (hypothesis runs many examples)."""
    return USERS.user("alice") if credential == Password("alice", "secret") else None


@settings(max_examples=200, deadline=None)
@given(st.fixed_dictionaries({}, optional={"user": JUNK | st.just("alice"), "pass": JUNK | st.just("secret"),
                                           "auth_token": JUNK | st.just("fh_0011223344556677_x"), "account": JUNK,
                                           "new_account": JUNK, "verbose": JUNK, "echo": st.booleans()}))
def test_any_connect_options_log_in_only_with_a_proven_credential(options):
    """Whatever the CONNECT carries: no crash, and the client is either refused and closed, or in as the user
    its credential proves (and then nothing it publishes is outside that user's rights)."""
    client = Client(Access(USERS), verify=_alice_only)
    client.feed(b"CONNECT " + orjson.dumps(options) + b"\r\nPUB orders.x 0\r\n\r\nPUB other 0\r\n\r\nPING\r\n")
    proven = options.get("user") == "alice" and options.get("pass") == "secret" \
        and not options.get("account") and not options.get("new_account") \
        and isinstance(options.get("auth_token", ""), str | None)  # a credential field that is no string: refused
    assert client.closed != proven
    assert [message.subject for message in client.published] == (["orders.x"] if proven else [])
