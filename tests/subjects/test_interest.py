"""Interest announcements: an owner's own patterns, and the table every gateway keeps of everyone's."""
from __future__ import annotations

import orjson
from hypothesis import given
from hypothesis import strategies as st

from fyrehose.gateways.channels import subject_to_channel
from fyrehose.subjects.envelope import Envelope, decode, encode
from fyrehose.subjects.interest import INTEREST_SUBJECT, MAX_ANNOUNCEMENT, InterestTable, LocalInterest
from fyrehose.subjects.patterns import match


def test_an_owner_announces_on_change_and_then_every_interval():
    local = LocalInterest("gw.a", interval=2.0)
    assert not local.due(0.0)  # nothing to say yet
    local.add("orders.>")
    local.add("orders.>")
    local.add_glob(b"news.*")
    assert local.due(0.0)
    announcement = local.announcement(0.0)
    assert announcement.subject == INTEREST_SUBJECT
    assert orjson.loads(announcement.data) == {"owner": "gw.a", "interval": 2.0, "subjects": {"orders.>": 2},
                                               "globs": {"news.*": 1}}
    assert not local.due(1.9) and local.due(2.0)
    local.remove("orders.>")
    local.remove("orders.>")
    assert local.due(0.5) and orjson.loads(local.announcement(0.5).data)["subjects"] == {}
    assert orjson.loads(local.leave().data)["interval"] == 0.0


def test_an_owner_that_never_subscribed_stays_silent():
    local = LocalInterest("c.1")
    assert not local.due(100.0) and local.leave() is None


def test_an_owner_too_big_for_one_message_announces_everything():
    local = LocalInterest("gw.big")
    for index in range(MAX_ANNOUNCEMENT // 10):
        local.add(f"subject.number.{index}")
    data = orjson.loads(local.announcement(0.0).data)
    assert data["subjects"] == {">": 1}
    table = InterestTable()
    table.receive(local.announcement(0.0), 0.0)
    assert table.count("anything.at.all") == 1


def test_the_table_counts_other_owners_and_forgets_the_silent_and_the_leaving():
    table = InterestTable(subject_to_channel)
    a, b = LocalInterest("gw.a"), LocalInterest("gw.b", interval=1.0)
    a.add("orders.*")
    a.add("orders.eu")
    b.add_glob(b"orders.*")
    b.add_glob(b"h?llo")
    assert table.receive(a.announcement(0.0), 0.0) and table.receive(b.announcement(0.0), 0.0)
    assert table.count("orders.eu") == 3
    assert table.count("orders.eu", exclude="gw.a") == 1
    assert table.count("hello") == 1 and table.count("nothing.here") == 0
    assert table.expire(2.9) == [] and table.expire(3.0) == ["gw.b"]
    assert table.count("orders.eu") == 2
    table.receive(a.leave(), 3.0)
    assert table.count("orders.eu") == 0 and len(table) == 0


def test_a_new_announcement_replaces_the_old_one_whole():
    table = InterestTable()
    local = LocalInterest("c.1")
    local.add("a.b")
    table.receive(local.announcement(0.0), 0.0)
    local.remove("a.b")
    local.add("c.d")
    table.receive(local.announcement(1.0), 1.0)
    assert table.count("a.b") == 0 and table.count("c.d") == 1


patterns = st.lists(st.sampled_from(["a", "b", "*"]), min_size=1, max_size=3).map(".".join) \
    | st.sampled_from(["a.>", ">", "b.>"])
literal = st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=4).map(".".join)


@given(st.lists(st.tuples(st.sampled_from(["o1", "o2", "o3"]), patterns, st.booleans()), max_size=30), literal)
def test_the_table_agrees_with_a_direct_count(operations, subject):
    owners = {name: LocalInterest(name) for name in ("o1", "o2", "o3")}
    model: dict[str, list[str]] = {name: [] for name in owners}
    table = InterestTable()
    for owner, pattern, adding in operations:
        if adding:
            owners[owner].add(pattern)
            model[owner].append(pattern)
        elif pattern in model[owner]:
            owners[owner].remove(pattern)
            model[owner].remove(pattern)
        wire = encode(owners[owner].announcement(0.0))  # through the envelope codec, as on the backbone
        assert table.receive(decode(wire), 0.0)
    for excluded in (None, "o1"):
        expected = sum(match(pattern, subject) for owner, held in model.items() if owner != excluded
                       for pattern in held)
        assert table.count(subject, exclude=excluded) == expected


@given(st.binary(max_size=200))
def test_malformed_announcements_are_counted_never_raised(data):
    table = InterestTable(subject_to_channel)
    accepted = table.receive(Envelope(INTEREST_SUBJECT, data), 0.0)
    assert table.rejected == (0 if accepted else 1)  # each refusal counted once, an accepted one never
    assert len(table) <= (1 if accepted else 0)


def test_each_kind_of_malformed_announcement_is_counted():
    table = InterestTable(subject_to_channel)
    bad = [b"not json", b"[]", b'{"interval": 1}', b'{"owner": 7}', b'{"owner": "x", "subjects": []}',
           b'{"owner": "x", "subjects": {"a": 0}}', b'{"owner": "x", "globs": {"a*": true}}',
           b'{"owner": "x", "interval": "soon"}']
    assert [table.receive(Envelope(INTEREST_SUBJECT, data), 0.0) for data in bad] == [False] * len(bad)
    assert table.rejected == len(bad) and len(table) == 0
    assert table.receive(Envelope(INTEREST_SUBJECT, b'{"owner": "x", "subjects": {"a": 1}}'), 0.0)
    assert table.rejected == len(bad) and len(table) == 1


def test_wildcards_that_are_not_patterns_are_rejected():
    table = InterestTable()
    bad = orjson.dumps({"owner": "x", "interval": 1, "subjects": {"a.>.b": 1}, "globs": {}})
    assert not table.receive(Envelope(INTEREST_SUBJECT, bad), 0.0) and table.rejected == 1
