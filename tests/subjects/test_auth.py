"""Authentication as a pure state machine: the exact construction, the database, replays, the trust exchange."""
from __future__ import annotations

import hashlib
import hmac
import json
import os
import stat
import struct
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fyrehose.runtime.credentials import load_auth_database, save_auth_database
from fyrehose.subjects.auth import (
    AuthDatabase,
    Authenticator,
    AuthError,
    Credentials,
    ReplayWindow,
    compute_ha0,
    exchange_key,
    session_key,
    sign,
)
from fyrehose.subjects.envelope import Envelope, MsgType, Status, encode
from fyrehose.subjects.session_table import AUTH_SUFFIX, LocalSession

SERVICE = "quotes"
WALL = 1_700_000_000_000_000


def database(*users: str) -> AuthDatabase:
    db = AuthDatabase()
    for user in users:
        db.add(user, SERVICE, f"password of {user}")
    return db


class Node:
    def __init__(self, db: AuthDatabase, user: str, interval: float = 1.0) -> None:
        self.session = LocalSession(user, interval)
        self.auth = Authenticator(Credentials(db, user, SERVICE), self.session)
        self.received: list[Envelope] = []

    def seal(self, envelope: Envelope) -> Envelope:
        return self.auth.sign(self.session.stamp(envelope))


class Bus:
    """The backbone's guarantee in miniature: every node sees every envelope, all in one order."""

    def __init__(self, *nodes: Node) -> None:
        self.nodes = list(nodes)
        self.wall = WALL
        self.log: list[Envelope] = []

    def send(self, envelope: Envelope) -> dict[str, list[str]]:
        """Deliver ``envelope`` and everything it causes; the verdicts per node, by subject."""
        verdicts: dict[str, list[str]] = {}
        pending = [envelope]
        while pending:
            current = pending.pop(0)
            self.log.append(current)
            self.wall += 1000
            for node in self.nodes:
                check = node.auth.check(current, self.wall)
                verdicts.setdefault(node.session.user, []).append(check.reason)
                if check.accepted:
                    node.received.append(current)
                pending.extend(check.answers)
        return verdicts

    def hello(self, node: Node) -> None:
        self.send(node.auth.sign(node.session.hello(self.wall)))


def trusted_pair():
    db = database("paul", "sam")
    paul, sam = Node(db, "paul"), Node(db, "sam")
    bus = Bus(paul, sam)
    bus.hello(paul)
    bus.hello(sam)
    return bus, paul, sam


# ---------------------------------------------------------------- the construction, pinned

def test_construction_matches_docs_security_md():
    db = database("paul")
    session = LocalSession("paul")
    authenticator = Authenticator(Credentials(db, "paul", SERVICE), session)
    signed = authenticator.sign(session.stamp(Envelope("NASDAQ.INTC", b"data", MsgType.UPDATE, Status.STALE,
                                                       reply="_INBOX.x.1")))
    ha0 = hashlib.sha256(b"paul" + SERVICE.encode() + b"password of paul").digest()
    ha1 = hashlib.sha256(ha0 + session.nonce.encode()).digest()
    ha2 = hashlib.sha256(struct.pack(">Q", signed.seqno) + encode(replace(signed, digest=None))).digest()
    assert signed.digest == hmac.new(ha1, ha2, hashlib.sha256).digest()
    assert db.lookup("paul", SERVICE) == ha0 == compute_ha0("paul", SERVICE, "password of paul")
    assert session_key(ha0, session.nonce) == ha1


# ---------------------------------------------------------------- the database

def test_database_keeps_ha0_only_and_round_trips(tmp_path):
    db = database("paul", "sam")
    path = tmp_path / "users.json"
    save_auth_database(db, path)
    text = path.read_text()
    assert "password" not in text
    assert json.loads(text) == [{"user": u, "svc": SERVICE, "hash": compute_ha0(u, SERVICE, f"password of {u}").hex()}
                                for u in ("paul", "sam")]
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    loaded = load_auth_database(path)
    assert loaded.users() == [("paul", SERVICE), ("sam", SERVICE)]
    assert loaded.remove("paul", SERVICE) and not loaded.remove("paul", SERVICE)
    assert loaded.lookup("paul", SERVICE) is None


@pytest.mark.parametrize("content,message", [
    ("not json", "not JSON"),
    ('{"user": "a"}', "JSON list"),
    ('[{"user": "a", "svc": "s"}]', "entry 1"),
    ('[{"user": "a", "svc": "s", "hash": "zz"}]', "entry 1"),
    ('[{"user": "a", "svc": "s", "hash": "00"}]', "32 bytes"),
    ('[{"user": "a.b", "svc": "s", "hash": "' + "00" * 32 + '"}]', "must not contain"),
])
def test_damaged_database_is_a_clear_error(tmp_path, content, message):
    path = tmp_path / "users.json"
    path.write_text(content)
    with pytest.raises(AuthError, match=message):
        load_auth_database(path)


@pytest.mark.parametrize("user,service,password", [("a.b", "s", "p"), ("a", "s*", "p"), ("", "s", "p"),
                                                   ("a", "s", "")])
def test_bad_entries_are_refused(user, service, password):
    with pytest.raises(AuthError):
        AuthDatabase().add(user, service, password)


def test_a_node_must_be_in_its_database():
    with pytest.raises(AuthError, match="not in the auth database"):
        Node(database("paul"), "sam")


# ---------------------------------------------------------------- the replay window

@settings(max_examples=300)
@given(st.integers(0, 50), st.integers(1, 40), st.lists(st.integers(0, 200), max_size=80))
def test_replay_window_accepts_each_seqno_once_within_the_window(floor, size, seqnos):
    window = ReplayWindow(floor, size)
    seen: set[int] = set()
    highest = floor
    for seqno in seqnos:
        expected = seqno > floor and seqno not in seen and seqno > highest - size
        assert window.accept(seqno) == expected
        if expected:
            seen.add(seqno)
            highest = max(highest, seqno)


# ---------------------------------------------------------------- the trust exchange

def test_hello_exchange_makes_two_nodes_trust_each_other():
    bus, paul, sam = trusted_pair()
    assert paul.auth.trusted_sessions() == [sam.session.name]
    assert sam.auth.trusted_sessions() == [paul.session.name]
    verdicts = bus.send(paul.seal(Envelope("NASDAQ.INTC", b"1")))
    assert verdicts == {"paul": ["accepted"], "sam": ["accepted"]}


def test_three_nodes_pairwise_and_exchanges_of_others_are_ignored():
    db = database("paul", "sam", "cache")
    nodes = [Node(db, name) for name in ("paul", "sam", "cache")]
    bus = Bus(*nodes)
    for node in nodes:
        bus.hello(node)
    for node in nodes:
        assert sorted(node.auth.trusted_sessions()) == sorted(n.session.name for n in nodes if n is not node)
        assert node.auth.stats["not for us"] > 0
        assert node.auth.stats["bad digest"] == 0


def test_messages_before_trust_are_refused():
    db = database("paul", "sam")
    paul, sam = Node(db, "paul"), Node(db, "sam")
    bus = Bus(paul, sam)
    assert bus.send(paul.seal(Envelope("q.x", b"early")))["sam"] == ["untrusted"]


def test_a_lost_hello_is_made_up_by_the_next_heartbeat():
    db = database("paul", "sam")
    paul, sam = Node(db, "paul"), Node(db, "sam")
    bus = Bus(paul)
    bus.hello(paul)  # sam is not on the bus yet: it misses paul's HELLO
    bus.nodes.append(sam)
    assert not sam.auth.trusts(paul.session.name)
    bus.send(paul.auth.sign(paul.session.heartbeat(bus.wall)))
    assert sam.auth.trusts(paul.session.name) and paul.auth.trusts(sam.session.name)


def test_unsigned_unknown_and_malformed_sessions_are_refused():
    bus, paul, sam = trusted_pair()
    assert sam.auth.check(Envelope("q.x", b"v"), bus.wall).reason == "unsigned"
    stranger = Node(database("mallory"), "mallory")
    assert sam.auth.check(stranger.seal(Envelope("q.x")), bus.wall).reason == "unknown user"
    bad_name = replace(paul.seal(Envelope("q.x")), session="paul")
    assert sam.auth.check(bad_name, bus.wall).reason == "bad session"


def test_forged_with_a_guessed_password_is_refused():
    bus, paul, sam = trusted_pair()
    impostor_db = AuthDatabase()
    impostor_db.add("paul", SERVICE, "guess")
    impostor = LocalSession("paul", name=paul.session.name)  # even the real session name does not help
    forged = Authenticator(Credentials(impostor_db, "paul", SERVICE), impostor).sign(
        impostor.stamp(Envelope("q.x", b"forged")))
    assert sam.auth.check(replace(forged, seqno=10_000), bus.wall).reason == "bad digest"
    assert sam.auth.check(forged, bus.wall).reason == "bad digest"


@pytest.mark.parametrize("change", [
    {"data": b"tampered"}, {"subject": "q.y"}, {"type": MsgType.INITIAL}, {"status": Status.STALE},
    {"reply": "_INBOX.mallory.1"}, {"seqno": 99}, {"digest": bytes(32)},
])
def test_tampering_with_any_field_is_refused(change):
    bus, paul, sam = trusted_pair()
    genuine = paul.seal(Envelope("q.x", b"genuine"))
    assert sam.auth.check(replace(genuine, **change), bus.wall).reason == "bad digest"
    assert sam.auth.check(genuine, bus.wall).accepted  # the refusal consumed nothing


def test_replays_are_refused_and_reordering_within_the_window_is_not():
    bus, paul, sam = trusted_pair()
    first, second, third = (paul.seal(Envelope("q.x", bytes([i]))) for i in range(3))
    assert [sam.auth.check(m, bus.wall).reason for m in (third, first, second, first, third)] == \
        ["accepted", "accepted", "accepted", "replayed", "replayed"]
    for _ in range(sam.auth.window_size):
        paul.session.next_seqno()
    assert sam.auth.check(paul.seal(Envelope("q.x")), bus.wall).accepted
    too_old = paul.auth.sign(replace(first, seqno=first.seqno + 3, digest=None))  # genuine, never seen, too old
    assert sam.auth.check(too_old, bus.wall).reason == "replayed"


def test_messages_from_before_the_trust_cannot_be_replayed_into_it():
    db = database("paul", "sam")
    paul, sam = Node(db, "paul"), Node(db, "sam")
    early = paul.seal(Envelope("q.x", b"before"))
    bus = Bus(paul, sam)
    bus.hello(paul)
    bus.hello(sam)
    assert sam.auth.check(early, bus.wall).reason == "replayed"


def test_stale_hello_gets_no_challenge():
    db = database("paul", "sam")
    paul, sam = Node(db, "paul"), Node(db, "sam")
    old = paul.auth.sign(paul.session.hello(WALL - 60_000_000))
    check = sam.auth.check(old, WALL)
    assert (check.reason, check.answers) == ("stale hello", ())


def test_a_replayed_hello_of_a_dead_session_never_becomes_trusted():
    db = database("paul", "sam")
    paul, sam = Node(db, "paul"), Node(db, "sam")
    hello = paul.auth.sign(paul.session.hello(WALL))
    bus = Bus(sam)  # paul is gone; only its HELLO is replayed
    bus.send(hello)
    assert not sam.auth.trusts(paul.session.name)
    assert any(e.subject == f"_INBOX.{paul.session.name}.{AUTH_SUFFIX}" for e in bus.log)  # challenged, unanswered


def test_a_replayed_exchange_does_not_restore_expired_trust():
    bus, paul, sam = trusted_pair()
    exchanges = [e for e in bus.log if e.subject == f"_INBOX.{sam.session.name}.{AUTH_SUFFIX}"]
    sam.auth.expire(bus.wall + 10_000_000)  # paul silent for 10 s > 3 intervals: forgotten
    assert not sam.auth.trusts(paul.session.name)
    for exchange in exchanges:
        assert not sam.auth.check(exchange, bus.wall).accepted
    assert not sam.auth.trusts(paul.session.name)
    assert sam.auth.check(paul.seal(Envelope("q.x")), bus.wall).reason == "untrusted"


def test_an_impostor_cannot_answer_a_challenge():
    """Mallory replays paul's HELLO and answers sam's challenge with a guessed password."""
    db = database("paul", "sam")
    paul, sam = Node(db, "paul"), Node(db, "sam")
    bus = Bus(sam)
    bus.send(paul.auth.sign(paul.session.hello(bus.wall)))
    (challenge,) = [e for e in bus.log if e.subject == f"_INBOX.{paul.session.name}.{AUTH_SUFFIX}"]
    asked = json.loads(challenge.data)
    data = json.dumps({"auth_time": asked["time"], "time": bus.wall, "cnonce": "c"}).encode()
    guessed = compute_ha0("paul", SERVICE, "guess")
    answer = paul.session.stamp(Envelope(f"_INBOX.{sam.session.name}.{AUTH_SUFFIX}", data))
    forged = sign(exchange_key(guessed, paul.session.nonce, asked["time"], asked["cnonce"]), answer)
    assert sam.auth.check(forged, bus.wall).reason == "bad digest"
    assert not sam.auth.trusts(paul.session.name)
    genuine = sign(exchange_key(db.lookup("paul", SERVICE), paul.session.nonce, asked["time"], asked["cnonce"]),
                   answer)
    assert sam.auth.check(genuine, bus.wall).reason == "trusted"  # the same answer from the key holder works


def test_bye_ends_trust():
    bus, paul, sam = trusted_pair()
    assert bus.send(paul.seal(Envelope("_SESSION.BYE")))["sam"] == ["accepted"]
    assert bus.send(paul.seal(Envelope("q.x")))["sam"] == ["untrusted"]


def test_own_messages_are_accepted_once():
    bus, paul, sam = trusted_pair()
    mine = paul.seal(Envelope("q.x"))
    assert [paul.auth.check(mine, bus.wall).reason for _ in range(2)] == ["accepted", "replayed"]
    assert paul.auth.check(replace(mine, data=b"x", seqno=mine.seqno + 1), bus.wall).reason == "bad digest"


@pytest.mark.parametrize("data", [b"", b"[]", b'{"auth_time":"x","time":1,"cnonce":"c"}',
                                  b'{"auth_time":1,"time":1,"cnonce":7}', b"\xff"])
def test_malformed_exchange_messages_are_refused(data):
    bus, paul, sam = trusted_pair()
    message = sign(b"k" * 32, paul.session.stamp(Envelope(f"_INBOX.{sam.session.name}.{AUTH_SUFFIX}", data)))
    assert sam.auth.check(message, bus.wall).reason == "bad exchange"


def test_an_exchange_answering_nothing_we_sent_is_unexpected():
    bus, paul, sam = trusted_pair()
    data = json.dumps({"auth_time": 5, "time": 6, "cnonce": "c"}).encode()
    message = sign(b"k" * 32, paul.session.stamp(Envelope(f"_INBOX.{sam.session.name}.{AUTH_SUFFIX}", data)))
    assert sam.auth.check(message, bus.wall).reason == "unexpected exchange"
