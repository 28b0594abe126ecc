"""The outbox says it turned ready by putting its owner on a list, never by calling back into its driver."""
from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from fyrehose.gateways.outbox import Outbox


def watched() -> tuple[Outbox, list]:
    outbox, ready = Outbox(), []
    outbox.became_ready, outbox.owner = ready, "driver"
    return outbox, ready


def test_the_owner_goes_on_the_list_once_when_the_outbox_turns_ready():
    outbox, ready = watched()
    outbox.push(b"a")
    outbox.push(b"b")
    outbox.reply(b"c")
    assert ready == ["driver"] and outbox.take() == b"abc"
    outbox.push(b"d")
    assert ready == ["driver", "driver"]


def test_nothing_goes_on_the_list_while_the_driver_holds_the_outbox():
    outbox, ready = watched()
    outbox.held = True
    outbox.push(b"a")
    outbox.close("bye")
    assert ready == [] and outbox.take() == b"a" and outbox.closing == "bye"


def test_a_close_with_nothing_to_write_still_turns_it_ready():
    outbox, ready = watched()
    outbox.close("bye")
    assert ready == ["driver"] and outbox.closing == "bye"


def test_a_filled_slot_releases_what_waited_and_turns_it_ready():
    outbox, ready = watched()
    slot = outbox.hold()
    outbox.reply(b"after")
    assert ready == []
    outbox.fill(slot, b"first")
    assert ready == ["driver"] and outbox.take() == b"firstafter"


@given(st.lists(st.sampled_from(["push", "reply", "take", "hold"]), max_size=40))
def test_the_list_grows_only_at_empty_to_ready_turns(steps):
    outbox, ready = watched()
    turns = 0
    for step in steps:
        before = not outbox._ready  # noqa: SLF001 - whether it held nothing ready before the step
        if step == "take":
            outbox.take()
            continue
        if step == "hold":
            outbox.hold()
            continue
        getattr(outbox, step)(b"x")
        if before and outbox._ready:  # noqa: SLF001
            turns += 1
    assert len(ready) == turns
