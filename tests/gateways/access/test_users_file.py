"""The users file: secrets only as scrypt hashes, checks in constant time, a clear error for every bad file."""
from __future__ import annotations

import json
import statistics
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fyrehose.gateways.access import secrets
from fyrehose.gateways.access.permissions import Permissions
from fyrehose.gateways.access.users import Entry, Password, Token, User, UsersFile, UsersFileError


def users_with(password: str = "right") -> tuple[UsersFile, str]:
    token, token_id, stored = secrets.new_token()
    users = UsersFile({
        "alice": Entry(User("alice", Permissions.of(["orders.>"], ["orders.audit"])), secrets.hash_secret(password)),
        "bot": Entry(User("bot"), None, {token_id: stored}),
        "guest": Entry(User("guest", Permissions.of([]), Permissions.of(["public.>"]))),
        "default": Entry(User("default"), secrets.hash_secret("redis")),
    }, anonymous="guest")
    return users, token


def test_passwords_and_tokens_are_checked_and_never_stored_in_clear():
    users, token = users_with()
    stored = users.to_json()
    assert b"right" not in stored and token.encode() not in stored and token.split("_", 2)[2].encode() not in stored
    again = UsersFile.from_json(stored)
    assert again.verify(Password("alice", "right")) == users.user("alice")
    assert again.verify(Password("alice", "wrong")) is None
    assert again.verify(Password("nobody", "right")) is None
    assert again.verify(Password(None, "redis")).name == "default"  # Redis's one-argument AUTH
    assert again.verify(Token(token)).name == "bot"
    assert again.verify(Token(token[:-1] + ("A" if token[-1] != "A" else "B"))) is None
    assert again.verify(Token("fh_" + "0" * 16 + "_x")) is None
    assert again.verify(Token("not a token")) is None
    assert again.anonymous_user().name == "guest"


def test_a_verified_credential_is_remembered_and_a_wrong_one_never():
    users, token = users_with()
    assert users.remembered(Password("alice", "right")) is None
    assert users.verify(Password("alice", "right")) is not None
    assert users.remembered(Password("alice", "right")).name == "alice"
    assert users.remembered(Password("alice", "wrong")) is None
    users.verify(Password("alice", "wrong"))
    assert users.remembered(Password("alice", "wrong")) is None
    assert users.verify(Token(token)) is not None and users.remembered(Token(token)).name == "bot"
    # a re-read file remembers nothing: a changed password is never taken from memory
    assert UsersFile.from_json(users.to_json()).remembered(Password("alice", "right")) is None


def test_an_overlong_secret_is_refused_even_when_its_prefix_is_right():
    users = UsersFile({"a": Entry(User("a"), secrets.hash_secret("x" * secrets.MAX_SECRET))})
    assert users.verify(Password("a", "x" * secrets.MAX_SECRET)) is not None
    assert users.verify(Password("a", "x" * (secrets.MAX_SECRET + 1))) is None


def test_an_unknown_user_costs_what_a_wrong_password_costs():
    """The check hashes as much for a user that does not exist (a decoy hash) as for a wrong password.

    Compared as the median of alternated runs' CPU time in this process, with a tolerance far above the noise and
    far below the difference a skipped hash would make (a lookup alone takes microseconds, a hash milliseconds).
    """
    users, _ = users_with()
    users.verify(Password("nobody", "x"))  # the decoy is made once, on first use
    unknown, wrong = [], []
    for _ in range(7):
        for name, samples in (("nobody", unknown), ("alice", wrong)):
            started = time.process_time()
            assert users.verify(Password(name, "guess")) is None
            samples.append(time.process_time() - started)
    ratio = statistics.median(unknown) / statistics.median(wrong)
    assert 0.5 < ratio < 2.0, (unknown, wrong)


def test_stored_secrets_use_our_parameters_and_a_fresh_salt():
    first, second = secrets.hash_secret("same"), secrets.hash_secret("same")
    assert first != second
    n, r, p, salt, digest = secrets.parse_stored(first)
    assert (n, r, p, len(salt), len(digest)) == (secrets.N, secrets.R, secrets.P, secrets.SALT_BYTES,
                                                 secrets.HASH_BYTES)


def document(**users) -> bytes:
    return json.dumps({"fyrehose_users": 1, "users": users}).encode()


@pytest.mark.parametrize("data, message", [
    (b"{", "not JSON"),
    (b"[]", "not a fyrehose users file"),
    (json.dumps({"fyrehose_users": 2}).encode(), "not a fyrehose users file"),
    (json.dumps({"fyrehose_users": 1, "users": []}).encode(), "\"users\" is not an object"),
    (document(**{"a b": {}}), "bad user name"),
    (document(a={"password": "secret"}), "not a scrypt hash"),
    (document(a={"password": "scrypt$3$8$1$AAAAAAAAAAA$" + "A" * 43}), "out of range"),
    (document(a={"password": "scrypt$16384$8$1$!!$AA"}), "malformed"),
    (document(a={"colour": "red"}), "unknown field 'colour'"),
    (document(a={"publish": {"allow": ["a..b"]}}), "user 'a'"),
    (document(a={"publish": {"allow": "a"}}), "lists of subject patterns"),
    (document(a={"tokens": {"short": secrets.hash_secret("x")}}), "bad token entry"),
    (json.dumps({"fyrehose_users": 1, "anonymous": "ghost", "users": {}}).encode(), "names no user"),
])
def test_a_bad_file_is_one_line_naming_the_file_and_the_problem(data, message):
    with pytest.raises(UsersFileError) as raised:
        UsersFile.from_json(data, "users.json")
    text = str(raised.value)
    assert text.startswith("users.json: ") and message in text and "\n" not in text


@settings(max_examples=300, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=20),
                    lambda children: st.lists(children, max_size=4)
                    | st.dictionaries(st.text(max_size=10), children, max_size=4), max_leaves=20))
def test_any_json_either_loads_or_is_refused_with_the_file_error(value):
    for candidate in (value, {"fyrehose_users": 1, "users": value}, {"fyrehose_users": 1, "users": {"a": value}}):
        try:
            users = UsersFile.from_json(json.dumps(candidate).encode())
        except UsersFileError:
            continue
        assert UsersFile.from_json(users.to_json()).to_json() == users.to_json()
