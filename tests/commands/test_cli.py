"""The command line: pub, sub, --help everywhere, one-line errors."""
from __future__ import annotations

import errno
import os
import socket
import subprocess
import sys
import time

import pytest

from fyrehose.errors import CommandFailed, InputError

from support import FYREHOSE, free_port, run_cli

COMMANDS = ["backbone", "pub", "sub"]


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help(command):
    result = run_cli(command, "--help")
    assert result.returncode == 0
    assert b"usage: fyrehose " + command.encode() in result.stdout


def test_top_level_help_lists_the_commands():
    result = run_cli("--help")
    assert result.returncode == 0
    for command in COMMANDS:
        assert command.encode() in result.stdout


@pytest.mark.parametrize("args", [
    ["nonsense"],
    [],
    ["backbone", "--listen", "nowhere"],
    ["backbone", "--listen", "127.0.0.1:99999"],
    ["backbone", "--trust-net", "10.0.0.0/99"],
    ["backbone", "--workers", "-1"],
    ["sub", "--from", "0"],
    ["pub", "--timeout", "-3", "x"],
])
def test_bad_arguments_give_one_line_and_nonzero_exit(args):
    result = run_cli(*args)
    assert result.returncode != 0
    lines = result.stderr.decode().strip().splitlines()
    assert len(lines) == 1, lines
    assert "error" in lines[0]
    assert b"Traceback" not in result.stderr


def test_pub_without_backbone_is_one_line():
    result = run_cli("pub", "--backbone", f"127.0.0.1:{free_port()}", "hello", timeout=60)
    assert result.returncode == 1
    lines = result.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and "no KEEPALIVE-ACK" in lines[0]


def test_pub_prints_sequences_and_sub_prints_messages(backbone):
    sub = subprocess.Popen(FYREHOSE + ["sub", "--backbone", backbone.address, "--count", "3", "--timeout", "20"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        time.sleep(1.0)  # let it subscribe
        pub = run_cli("pub", "--backbone", backbone.address, "one", "two")
        assert pub.returncode == 0, pub.stderr
        assert pub.stdout.split() == [b"1", b"2"]
        pub = run_cli("pub", "--backbone", backbone.address, input=b"three\n")
        assert pub.stdout.split() == [b"3"]
        out, err = sub.communicate(timeout=30)
    finally:
        if sub.poll() is None:
            sub.kill()
            sub.wait()
    assert sub.returncode == 0, err
    assert out.decode().splitlines() == ["1\tone", "2\ttwo", "3\tthree"]


def test_sub_from_backfills_through_requests(backbone):
    keeper = subprocess.Popen(FYREHOSE + ["sub", "--backbone", backbone.address, "--timeout", "30"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        time.sleep(1.0)
        assert run_cli("pub", "--backbone", backbone.address, "a", "b", "c").returncode == 0
        time.sleep(0.3)
        late = run_cli("sub", "--backbone", backbone.address, "--from", "1", "--count", "3", "--timeout", "20")
        assert late.returncode == 0, late.stderr
        assert late.stdout.decode().splitlines() == ["1\ta", "2\tb", "3\tc"]
    finally:
        keeper.kill()
        keeper.wait()


def test_sub_reports_permanent_loss_and_exits_nonzero(backbone):
    assert run_cli("pub", "--backbone", backbone.address, "nobody keeps this").returncode == 0
    late = run_cli("sub", "--backbone", backbone.address, "--from", "1", "--give-up", "0.5", "--timeout", "3")
    assert late.returncode == 3
    assert "lost 1..1" in late.stderr.decode()


def test_pub_refuses_oversize_message(backbone):
    result = run_cli("pub", "--backbone", backbone.address, input=b"x" * 65499 + b"\n")
    assert result.returncode == 1
    assert "65499 bytes" in result.stderr.decode()


def test_version_and_python_dash_m():
    from fyrehose.commands.main import _version

    command = run_cli("--version")
    module = subprocess.run([sys.executable, "-m", "fyrehose", "--version"], capture_output=True, timeout=30)
    assert command.returncode == module.returncode == 0
    # the version, then which modules run compiled (tests/runtime/test_compiled.py)
    assert command.stdout == module.stdout
    assert command.stdout.decode().splitlines()[0] == f"fyrehose {_version()}"


def test_a_user_error_is_one_line_and_debug_adds_the_traceback(tmp_path):
    missing = str(tmp_path / "missing")
    plain = run_cli("journal", "verify", missing)
    assert plain.returncode == 1
    assert plain.stderr.decode().splitlines() == [f"fyrehose journal: error: {missing} is not a directory"]
    for debug in (run_cli("--debug", "journal", "verify", missing),
                  subprocess.run(FYREHOSE + ["journal", "verify", missing], capture_output=True, timeout=30,
                                 env={**os.environ, "FYREHOSE_DEBUG": "1"})):
        assert debug.returncode == 1
        lines = debug.stderr.decode().splitlines()
        assert lines[0] == "Traceback (most recent call last):"
        assert lines[-1] == f"fyrehose journal: error: {missing} is not a directory"


def test_a_programming_error_is_reported_as_internal_with_its_traceback(monkeypatch, capsys):
    from fyrehose.commands import journal as command
    from fyrehose.commands import main as cli

    def broken(args):
        return {}["no such key"]  # a bug: not the user's doing

    monkeypatch.setattr(command, "run", broken)
    assert cli.main(["journal", "verify", "x"]) == cli.EXIT_INTERNAL
    err = capsys.readouterr().err
    assert "Traceback (most recent call last):" in err and "KeyError" in err
    assert err.splitlines()[-1].startswith("fyrehose journal: internal error: KeyError: ")


def _failing(exc: BaseException):
    def run(args):
        raise exc
    return run


@pytest.mark.parametrize("exc", [
    InputError("--count must be at least 1"),
    CommandFailed("redis-server is not installed"),
    OSError(errno.EADDRINUSE, "Address already in use"),
    FileNotFoundError(2, "No such file or directory"),
    ConnectionRefusedError(111, "Connection refused"),
    TimeoutError("the journal writing sequence 9 did not happen within 120 s"),
    ModuleNotFoundError("No module named 'pyarrow'", name="pyarrow"),
], ids=lambda exc: type(exc).__name__)
def test_a_user_error_is_one_line_and_exit_1(exc, monkeypatch, capsys):
    from fyrehose.commands import journal as command
    from fyrehose.commands import main as cli

    monkeypatch.setattr(command, "run", _failing(exc))
    assert cli.main(["journal", "verify", "x"]) == cli.EXIT_FAILURE
    assert capsys.readouterr().err.splitlines() == [f"fyrehose journal: error: {exc}"]


@pytest.mark.parametrize("exc", [
    ValueError("not enough values to unpack (expected 2, got 1)"),
    TypeError("unsupported operand type(s) for +: 'int' and 'str'"),
    RuntimeError("dictionary changed size during iteration"),
    OSError(errno.EBADF, "Bad file descriptor"),
    ModuleNotFoundError("No module named 'fyrehose.nowhere'", name="fyrehose.nowhere"),
], ids=lambda exc: type(exc).__name__)
def test_a_programming_error_shows_its_traceback_and_exits_70(exc, monkeypatch, capsys):
    from fyrehose.commands import journal as command
    from fyrehose.commands import main as cli

    monkeypatch.setattr(command, "run", _failing(exc))
    assert cli.main(["journal", "verify", "x"]) == cli.EXIT_INTERNAL == 70
    err = capsys.readouterr().err
    assert err.startswith("Traceback (most recent call last):") and f"{type(exc).__name__}: {exc}" in err
    assert err.splitlines()[-1] == (f"fyrehose journal: internal error: {type(exc).__name__}: {exc} "
                                    "(a bug in fyrehose; the traceback is above)")


def test_an_unpacking_bug_inside_a_command_is_not_disguised_as_a_user_error():
    """A real ValueError from code (not from input), end to end: the traceback, exit 70."""
    code = ("import sys\n"
            "from fyrehose.commands import main as cli\n"
            "from fyrehose.commands import journal as command\n"
            "def run(args):\n"
            "    first, second = [args.action]\n"
            "command.run = run\n"
            "sys.exit(cli.main(['journal', 'verify', 'x']))\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=30)
    err = result.stderr.decode()
    assert result.returncode == 70, err
    assert "Traceback (most recent call last):" in err and 'File "<string>", line 5, in run' in err
    assert err.splitlines()[-1].startswith("fyrehose journal: internal error: ValueError: not enough values to unpack")


def test_bad_input_raised_by_a_command_is_an_input_error_of_one_line(tmp_path):
    result = run_cli("sub", "--count", "0")
    assert (result.returncode, result.stderr.decode()) == (1, "fyrehose sub: error: --count must be at least 1\n")
    result = run_cli("cache", "--user", "a.b", "--backbone", f"127.0.0.1:{free_port()}")
    assert result.returncode == 1 and result.stderr.decode().startswith("fyrehose cache: error: bad user name 'a.b'")
    assert len(result.stderr.decode().splitlines()) == 1


def test_an_address_in_use_is_one_line(tmp_path):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as taken:
        taken.bind(("127.0.0.1", 0))
        result = run_cli("backbone", "--listen", f"127.0.0.1:{taken.getsockname()[1]}", "--workers", "0",
                         "--state-dir", str(tmp_path / "state"))
    assert result.returncode == 1
    assert result.stderr.decode().splitlines() == ["fyrehose backbone: error: [Errno 98] Address already in use"]


def test_an_error_raised_without_a_message_is_still_a_line_that_names_it():
    from fyrehose.commands.main import error_line

    assert error_line(TimeoutError()) == "TimeoutError (no detail given)"
    assert error_line(TimeoutError("timed out")) == "timed out"
