"""fyrehose.runtime.process and fyrehose.runtime.durable: the child-process life cycle, wait_until, durable writes, the lock."""
from __future__ import annotations

import os
import signal
import sys

import pytest

from fyrehose.runtime.durable import (
    DirectoryInUse,
    DirectoryLock,
    move_into_place,
    remove_leftovers,
    replace_atomically,
)
from fyrehose.runtime.process import FYREHOSE, ChildProcess, wait_until
from fyrehose.runtime.readiness import LOOPBACK, free_port

# A child that announces itself like a fyrehose service, then either exits on SIGTERM or ignores it.
ANNOUNCER = """
import signal, sys, time
if sys.argv[1] == "stubborn":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("some start-up noise", file=sys.stderr, flush=True)
print("fyrehose test listening on 127.0.0.1:4321 (a child)", flush=True)
time.sleep(60)
"""


def test_wait_ready_reads_the_readiness_line_and_stop_uses_sigterm(tmp_path):
    child = ChildProcess([sys.executable, "-c", ANNOUNCER, "polite"], tmp_path / "child.log")
    assert child.wait_ready(20) == ("127.0.0.1", 4321)
    assert child.stop(10) == -signal.SIGTERM
    assert not child.alive()


def test_stop_kills_a_child_that_ignores_sigterm(tmp_path):
    child = ChildProcess([sys.executable, "-c", ANNOUNCER, "stubborn"], tmp_path / "child.log")
    child.wait_ready(20)
    assert child.stop(0.5) == -signal.SIGKILL


def test_a_child_that_exits_before_it_is_ready_is_one_error_with_its_output(tmp_path):
    child = ChildProcess(FYREHOSE + ["backbone", "--listen", "nonsense"], tmp_path / "child.log")
    with pytest.raises(RuntimeError, match="did not become ready \\(exit 1\\): fyrehose backbone: error: expected HOST:PORT"):
        child.wait_ready(20)


def test_a_real_backbone_announces_its_address(tmp_path):
    port = free_port()
    with ChildProcess(FYREHOSE + ["backbone", "--listen", f"{LOOPBACK}:{port}", "--state-dir", str(tmp_path / "s")],
                      tmp_path / "backbone.log") as backbone:
        assert backbone.wait_ready(20) == (LOOPBACK, port)
    assert backbone.proc.returncode == 0


def test_wait_until_returns_at_once_or_names_what_did_not_happen():
    wait_until(lambda: True, 0, "nothing")
    with pytest.raises(TimeoutError, match="the impossible did not happen within 0.1 s"):
        wait_until(lambda: False, 0.1, "the impossible")


def test_replace_atomically_sets_the_mode_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "secret"
    target.write_bytes(b"old")
    replace_atomically(target, b"new", mode=0o600)
    assert target.read_bytes() == b"new" and os.stat(target).st_mode & 0o777 == 0o600
    assert os.listdir(tmp_path) == ["secret"]
    (tmp_path / ".secret.abc123.tmp").write_bytes(b"half")  # a replacement a crash cut short
    remove_leftovers(target)
    assert os.listdir(tmp_path) == ["secret"]


def test_move_into_place_replaces_the_target_with_the_whole_temporary(tmp_path):
    target, temporary = tmp_path / "data.parquet", tmp_path / ".data.parquet.tmp"
    target.write_bytes(b"old")
    temporary.write_bytes(b"written by another library")
    move_into_place(temporary, target)
    assert target.read_bytes() == b"written by another library"
    assert os.listdir(tmp_path) == ["data.parquet"]
    with pytest.raises(FileNotFoundError):  # nothing to move: the target stays as it was
        move_into_place(temporary, target)
    assert target.read_bytes() == b"written by another library"


def test_the_directory_lock_has_one_holder(tmp_path):
    first, second = DirectoryLock(tmp_path), DirectoryLock(tmp_path)
    first.acquire()
    try:
        with pytest.raises(DirectoryInUse):
            second.acquire()
        assert (tmp_path / "lock").read_text() == f"{os.getpid()}\n"
    finally:
        first.release()
    second.acquire()
    second.release()
