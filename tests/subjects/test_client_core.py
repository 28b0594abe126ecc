"""A client's timers as one: one deadline and one call over the connection, its publishes and the subject session."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from fyrehose.protocol import codec
from fyrehose.protocol.connection import BackboneConnection, ConnectionOptions
from fyrehose.protocol.publishing import Finished
from fyrehose.protocol.tracker import Lost, TrackerOptions
from fyrehose.subjects import envelope
from fyrehose.subjects.client_core import ClientCore, Due
from fyrehose.subjects.session import SubjectSession

BACKBONE = ("127.0.0.1", 2323)
WALL_US = 1_700_000_000_000_000


def core(*, user: str | None = "alice", interval: float = 2.0, give_up_after: float = 1.0) -> ClientCore:
    connection = BackboneConnection(BACKBONE, ConnectionOptions(
        flags=codec.FLAG_BATCH, keepalive_interval=0.5, confirm_retry=0.2,
        tracker=TrackerOptions(give_up_after=give_up_after)), token_source=lambda size: b"t" * size)
    return ClientCore(connection, SubjectSession(user=user, interval=interval))


def kinds(datagrams: list[bytes]) -> list[int]:
    return [datagram[0] for datagram in datagrams]


def subjects_pushed(datagrams: list[bytes]) -> list[str]:
    """The subjects of the envelopes PUSHed without a tag (the session's control messages)."""
    out = []
    for datagram in datagrams:
        for start, end, tag in codec.scan(datagram, codec.PUSH)[0]:
            opened = envelope.decode(datagram[start + codec.FRAME_HEADER:end])
            assert tag == 0 and opened is not None
            out.append(opened.subject)
    return out


def test_the_first_call_sends_a_keepalive_and_the_next_deadline_is_the_next_one():
    client = core(user=None)
    assert client.next_deadline() == 0.0  # a fresh connection's KEEPALIVE is due at once
    due = client.handle_timers(0.0)
    assert kinds(due.datagrams) == [codec.KEEPALIVE] and due.events == [] and due.finished == []
    assert client.next_deadline() == 0.5
    assert client.handle_timers(0.4) == Due()  # nothing before the deadline


def test_a_session_heartbeat_has_a_deadline_of_its_own_and_goes_out_as_a_push():
    client = core(interval=2.0)
    client.handle_timers(0.0)
    client.session.start(0.0, WALL_US)  # type: ignore[union-attr]  # the session is given
    client.connection.handle_timers(1.9)  # keep the KEEPALIVEs out of the way: only the session is due at 2.0
    assert client.session.next_deadline() == 2.0  # type: ignore[union-attr]
    assert client.next_deadline() == 2.0
    due = client.handle_timers(2.0, WALL_US)
    heartbeats = [datagram for datagram in due.datagrams if datagram[0] == codec.PUSH]
    assert len(heartbeats) == 1 and subjects_pushed(heartbeats)[0].startswith("_SESSION.")
    assert client.session.next_deadline() == 4.0  # type: ignore[union-attr]


def test_a_changed_interest_is_due_at_once_and_then_every_interval():
    client = core(user=None, interval=3.0)
    assert client.session.next_deadline() == float("inf")  # type: ignore[union-attr]  # nothing announced, nothing due
    client.session.interest.add("orders.>")  # type: ignore[union-attr]
    assert client.next_deadline() == float("-inf")
    assert subjects_pushed([d for d in client.handle_timers(0.0).datagrams if d[0] == codec.PUSH]) == [
        "_INTEREST.ANNOUNCE"]
    assert client.session.next_deadline() == 3.0  # type: ignore[union-attr]


def test_unconfirmed_pushes_go_again_and_an_expired_batch_finishes_through_the_same_call():
    client = core(user=None)
    client.handle_timers(0.0)
    number, _ = client.publishes.start([b"a", b"b"], 0.0, 1.0)
    assert client.next_deadline() == 0.2  # the first retry, before the next KEEPALIVE
    due = client.handle_timers(0.2)
    assert kinds(due.datagrams) == [codec.PUSH] and due.finished == []
    due = client.handle_timers(1.0)
    assert due.finished == [Finished(number, None, 2)]


def test_a_hole_given_up_comes_out_as_events():
    client = core(user=None, give_up_after=1.0)
    connection = client.connection
    connection.track()
    connection.receive(codec.encode_deliver(1, b"one"), BACKBONE, 0.0)
    connection.receive(codec.encode_deliver(3, b"three"), BACKBONE, 0.0)
    client.handle_timers(0.0)
    due = client.handle_timers(client.next_deadline())
    while not due.events:
        due = client.handle_timers(client.next_deadline())
    assert isinstance(due.events[0], Lost) and (due.events[0].from_seq, due.events[0].to_seq) == (2, 2)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["wait", "publish", "deliver", "interest"]),
                          st.floats(0.0, 0.7, allow_nan=False)), max_size=40))
def test_nothing_is_ever_due_before_the_next_deadline(steps):
    """The contract every driver's wait relies on: a call before ``next_deadline()`` has nothing to do."""
    client = core(interval=1.0)
    client.session.start(0.0, WALL_US)  # type: ignore[union-attr]
    client.connection.track()
    now, seq = 0.0, 1
    for action, step in steps:
        if action == "publish":
            client.publishes.start([b"x"], now, 2.0)
        elif action == "deliver":
            seq += 1 + int(step * 4)  # sometimes a hole
            client.connection.receive(codec.encode_deliver(seq, b"m"), BACKBONE, now)
        elif action == "interest":
            client.session.interest.add("a.b")  # type: ignore[union-attr]
        deadline = client.next_deadline()
        if now < deadline:
            early = min(now + step, deadline) if deadline - now > 1e-9 else now
            if early < deadline:
                assert client.handle_timers(early, WALL_US) == Due()
                now = early
        now = max(now, min(deadline, now + step))
        client.handle_timers(now, WALL_US)
