"""Tests of the persisted sequence high-water mark (fyrehose.backbone.host.statefile)."""
from __future__ import annotations

import os

import pytest

from fyrehose.backbone.host.statefile import ReservationWriter, SequenceStateFile, StateError
from fyrehose.backbone.sequence_counter import SequenceCounter
from fyrehose.runtime.credentials import load_auth_database, save_auth_database

MAX_SEQUENCE = (1 << 48) - 1


@pytest.fixture
def opened():
    """Open state files and always close them, even when a test fails."""
    files: list[SequenceStateFile] = []

    def make(directory) -> SequenceStateFile:
        state = SequenceStateFile(directory)
        files.append(state)
        return state

    yield make
    for state in files:
        state.close()


def test_open_on_empty_directory_returns_zero(tmp_path, opened):
    assert opened(tmp_path).open() == 0


def test_open_creates_missing_directory(tmp_path, opened):
    directory = tmp_path / "a" / "b"
    assert opened(directory).open() == 0
    assert directory.is_dir()


@pytest.mark.parametrize("value", [0, 1, 65537, 1 << 40, MAX_SEQUENCE])
def test_write_read_round_trip(tmp_path, opened, value):
    state = opened(tmp_path)
    state.open()
    state.write(value)
    assert state.read() == value


def test_value_survives_reopen(tmp_path, opened):
    first = opened(tmp_path)
    assert first.open() == 0
    first.write(12345)
    first.write(70000)
    first.close()
    second = opened(tmp_path)
    assert second.open() == 70000


def test_second_instance_is_locked_out_while_first_is_open(tmp_path, opened):
    first = opened(tmp_path)
    first.open()
    first.write(5)
    second = opened(tmp_path)
    with pytest.raises(StateError):
        second.open()
    # the failed attempt did not disturb the owner
    first.write(6)
    assert first.read() == 6
    first.close()
    # once the first is closed the directory is free again
    assert second.open() == 6


def test_lock_is_per_directory(tmp_path, opened):
    assert opened(tmp_path / "one").open() == 0
    assert opened(tmp_path / "two").open() == 0


@pytest.mark.parametrize("content", ["garbage", "12abc", "", "1.5", "0x10"])
def test_garbage_content_raises_state_error(tmp_path, opened, content):
    (tmp_path / "sequence").write_text(content)
    with pytest.raises(StateError):
        opened(tmp_path).open()


@pytest.mark.parametrize("content", ["-1", str(MAX_SEQUENCE + 1)])
def test_out_of_range_content_raises_state_error(tmp_path, opened, content):
    (tmp_path / "sequence").write_text(content + "\n")
    with pytest.raises(StateError):
        opened(tmp_path).open()


def test_reads_value_with_surrounding_whitespace(tmp_path, opened):
    (tmp_path / "sequence").write_text("  42\n")
    assert opened(tmp_path).open() == 42


def test_failed_open_does_not_keep_the_directory_locked(tmp_path):
    (tmp_path / "sequence").write_text("garbage")
    failed = SequenceStateFile(tmp_path)
    try:
        with pytest.raises(StateError):
            failed.open()
        (tmp_path / "sequence").write_text("7\n")
        retry = SequenceStateFile(tmp_path)
        try:
            assert retry.open() == 7
        finally:
            retry.close()
    finally:
        failed.close()


def test_write_is_atomic_and_leaves_no_temporary_file(tmp_path, opened):
    state = opened(tmp_path)
    state.open()
    for value in (1, 100, 99999, 5):
        state.write(value)
        names = sorted(os.listdir(tmp_path))
        assert not any(name.endswith(".tmp") for name in names), names
        assert (tmp_path / "sequence").read_text().strip() == str(value)
    assert state.read() == 5


def test_write_replaces_file_instead_of_rewriting_in_place(tmp_path, opened):
    # atomic replacement: a reader holding the old file still sees the old complete value
    state = opened(tmp_path)
    state.open()
    state.write(111)
    with open(tmp_path / "sequence") as old:
        state.write(222222)
        assert old.read().strip() == "111"
    assert state.read() == 222222


def test_stale_temporary_file_from_a_crash_is_harmless(tmp_path, opened):
    (tmp_path / "sequence").write_text("10\n")
    (tmp_path / ".sequence.k2x9q1.tmp").write_text("999")  # a crash after creating the temporary file
    state = opened(tmp_path)
    assert state.open() == 10
    state.write(11)
    assert state.read() == 11
    assert not (tmp_path / ".sequence.k2x9q1.tmp").exists()


def test_close_is_idempotent(tmp_path):
    state = SequenceStateFile(tmp_path)
    state.open()
    state.close()
    state.close()
    other = SequenceStateFile(tmp_path)
    try:
        assert other.open() == 0
    finally:
        other.close()


def test_the_users_database_is_written_with_the_same_durable_replacement(tmp_path):
    """auth.py, the journal and the state file share fyrehose.runtime.durable: owner-only, no temporary left."""
    from fyrehose.subjects.auth import AuthDatabase

    database = AuthDatabase()
    database.add("paul", "svc", "secret")
    save_auth_database(database, tmp_path / "users.json")
    assert os.stat(tmp_path / "users.json").st_mode & 0o777 == 0o600
    assert os.listdir(tmp_path) == ["users.json"]
    assert load_auth_database(tmp_path / "users.json").lookup("paul", "svc") is not None


# ---------------------------------------------------------------- reservations persisted in the background


def test_a_reservation_is_written_in_the_background_and_covered_before_use(tmp_path, opened):
    state = opened(tmp_path)
    state.open()
    writer = ReservationWriter(state, durable=0)
    try:
        writer.cover(0)  # nothing issued: nothing to wait for
        writer.submit(100)
        writer.cover(100)  # returns once 100 is on disk
        assert writer.durable == 100 and state.read() == 100
        writer.submit(50)  # never lowers the mark
        writer.submit(300)
        with pytest.raises(StateError):
            writer.cover(301)  # issued beyond every reservation: a bug, never sent
    finally:
        writer.close()
    assert state.read() == 300  # what was submitted is written before close returns


class BrokenDisk(SequenceStateFile):
    def write(self, value: int) -> None:
        raise OSError(28, "No space left on device")


def test_a_failed_write_is_raised_where_the_numbers_wait_for_it(tmp_path):
    writer = ReservationWriter(BrokenDisk(tmp_path), durable=10)
    writer.cover(10)
    writer.submit(20)
    with pytest.raises(StateError, match="No space left on device"):
        writer.cover(20)
    with pytest.raises(StateError, match="No space left on device"):
        writer.cover(5)  # and at every flush after: the backbone stops
    writer.close()


def test_the_next_block_is_reserved_while_half_of_this_one_is_still_unissued():
    counter = SequenceCounter(reserved=0, block=100)
    assert counter.take(1) == 1 and (counter.reserved, counter.unpersisted) == (101, True)  # waited for
    counter.unpersisted = False
    counter.take(50)  # last 51: half of 101 is still left
    assert (counter.reserved, counter.unpersisted) == (101, False)
    counter.take(1)  # last 52: the next block, while 52 is already covered by 101
    assert (counter.reserved, counter.unpersisted) == (201, True) and counter.last_issued <= 101
