"""One client's login: throttled guessing, remembered credentials, rights that follow a re-read file."""
from __future__ import annotations

from collections import Counter

from fyrehose.gateways.access import guard, secrets
from fyrehose.gateways.access.login import EVERYONE, Access, Login, Outcome
from fyrehose.gateways.access.permissions import Permissions
from fyrehose.gateways.access.users import Entry, Password, User, UsersFile


def users(password: str = "right", anonymous: str | None = "guest") -> UsersFile:
    return UsersFile({
        "alice": Entry(User("alice", Permissions.of(["orders.>"], ["orders.audit"]),
                            Permissions.of(None, ["secret.>"])), secrets.hash_secret(password)),
        "guest": Entry(User("guest", Permissions.of([]), Permissions.of(["public.>"]))),
    }, anonymous=anonymous)


def log_in(login: Login, credential, now: float = 0.0) -> Outcome:
    outcome = login.attempt(credential, now)
    if outcome is None:
        outcome = login.conclude(login.access.users.verify(credential), now)
    return outcome


def test_without_users_every_client_may_do_everything():
    login = Login(Access(None), "10.0.0.1")
    assert login.user is EVERYONE and login.allowed_in and not login.logged_in and not login.filtered
    assert login.may_publish("x") and login.may_subscribe(">") and login.may_receive("x")
    assert login.attempt(Password("a", "b"), 0.0) is Outcome.REFUSED  # nothing to log in to


def test_a_client_starts_anonymous_and_gets_its_users_rights_after_logging_in():
    stats = Counter()
    login = Login(Access(users(), stats), "10.0.0.1")
    assert login.user.name == "guest" and login.name == "guest" and not login.logged_in
    assert login.may_subscribe("public.news") and not login.may_subscribe(">") and not login.may_publish("x")
    assert log_in(login, Password("alice", "right")) is Outcome.ACCEPTED
    assert login.logged_in and login.name == "alice"
    assert login.may_publish("orders.new") and not login.may_publish("orders.audit")
    assert login.may_subscribe(">") and login.filtered
    assert login.may_receive("news") and not login.may_receive("secret.plans")
    assert stats["logins accepted"] == 1


def test_without_an_anonymous_user_a_client_without_credentials_may_do_nothing():
    login = Login(Access(users(anonymous=None)), "10.0.0.1")
    assert login.user is None and not login.allowed_in
    assert not login.may_publish("x") and not login.may_subscribe("x") and not login.may_receive("x")


def test_guessing_is_slowed_per_address_and_a_throttled_attempt_is_not_even_checked():
    stats = Counter()
    access = Access(users(), stats)
    guesser, other = Login(access, "10.0.0.66"), Login(access, "10.0.0.7")
    for _ in range(guard.FREE_FAILURES):
        assert log_in(guesser, Password("alice", "guess"), now=100.0) is Outcome.REFUSED
    assert log_in(guesser, Password("alice", "guess"), now=100.0) is Outcome.REFUSED  # the first one slowed
    # now refused at once, even the right password, until the window has passed
    assert guesser.attempt(Password("alice", "right"), 100.0 + guard.FIRST_WINDOW / 2) is Outcome.THROTTLED
    assert stats["logins throttled"] == 1
    # another address is not slowed
    assert log_in(other, Password("alice", "right"), now=100.0) is Outcome.ACCEPTED
    assert log_in(guesser, Password("alice", "right"), now=100.0 + guard.FIRST_WINDOW) is Outcome.ACCEPTED
    assert stats["logins refused"] == guard.FREE_FAILURES + 1


def test_the_refusal_window_doubles_and_is_bounded_and_forgotten():
    throttle = guard.LoginThrottle()
    now = 0.0
    windows = []
    for _ in range(guard.FREE_FAILURES + 12):
        throttle.failed("a", now)
        windows.append(throttle.blocked("a", now))
    assert windows[:guard.FREE_FAILURES] == [0.0] * guard.FREE_FAILURES
    assert windows[guard.FREE_FAILURES:guard.FREE_FAILURES + 3] == [guard.FIRST_WINDOW * k for k in (1, 2, 4)]
    assert max(windows) == guard.MAX_WINDOW
    assert throttle.blocked("a", now + guard.FORGET_AFTER) == 0.0 and len(throttle) == 0


def test_the_throttle_table_is_bounded():
    throttle = guard.LoginThrottle()
    for number in range(guard.MAX_ADDRESSES + 10):
        throttle.failed(str(number), 0.0)
    assert len(throttle) == guard.MAX_ADDRESSES


def test_rights_follow_a_re_read_file_and_a_removed_user_loses_every_right():
    access = Access(users())
    login = Login(access, "10.0.0.1")
    assert log_in(login, Password("alice", "right")) is Outcome.ACCEPTED
    assert login.may_publish("orders.new")
    changed = users()
    changed.entries["alice"].user = User("alice", Permissions.of(["billing.>"]))
    access.replace(changed)
    assert not login.may_publish("orders.new") and login.may_publish("billing.x")
    del changed.entries["alice"]
    access.replace(UsersFile(changed.entries, changed.anonymous))
    assert login.user is None and not login.may_publish("billing.x")


def test_a_remembered_credential_logs_in_without_a_verify():
    access = Access(users())
    assert log_in(Login(access, "a"), Password("alice", "right")) is Outcome.ACCEPTED
    assert Login(access, "b").attempt(Password("alice", "right"), 0.0) is Outcome.ACCEPTED
    assert Login(access, "b").attempt(Password("alice", "wrong"), 0.0) is None  # must be verified


def test_a_certificate_names_a_user_of_the_file_or_nobody():
    login = Login(Access(users()), "a")
    assert not login.certificate("mallory") and not login.certificate(None) and login.name == "guest"
    assert login.certificate("alice") and login.name == "alice"


def test_per_address_counts_and_the_log_limiter():
    counts = guard.AddressCounts(2)
    assert counts.admit("a") and counts.admit("a") and not counts.admit("a") and counts.admit("b")
    counts.release("a")
    assert counts["a"] == 1 and counts.admit("a")
    limiter = guard.LogLimiter()
    assert limiter.allow("a", 0.0) and not limiter.allow("a", 0.5) and limiter.allow("b", 0.5)
    assert limiter.allow("a", 1.0) and limiter.suppressed == 1
