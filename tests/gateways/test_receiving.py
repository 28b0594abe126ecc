"""How a parsing gateway connection takes its client's bytes (the opening of the Redis, NATS and Marlin ``receive``)."""
from __future__ import annotations

from collections import deque

from fyrehose.gateways.outbox import Outbox
from fyrehose.gateways.receiving import ParsingConnection


class Lines:
    """A parser: complete lines out, the rest held."""

    def __init__(self) -> None:
        self.held = b""

    def feed(self, data: bytes) -> list[bytes]:
        *lines, self.held = (self.held + data).split(b"\n")
        return lines


class Connection(ParsingConnection[Lines, bytes]):
    """Runs the unread lines up to one that says ``wait``; says what its parser was told first."""

    def __init__(self) -> None:
        self.outbox = Outbox()
        self.parser = Lines()
        self.last_input = 0.0
        self._unread: deque[bytes] = deque()
        self.ran: list[bytes] = []
        self.prepared = 0

    def _before_parsing(self) -> None:
        self.prepared += 1

    def _run(self) -> None:
        while self._unread and self._unread[0] != b"wait":
            self.ran.append(self._unread.popleft())


def test_items_run_in_order_across_reads_and_wait_behind_one_that_must_wait():
    connection = Connection()
    connection.receive(b"a\nb", 1.0)
    assert connection.ran == [b"a"] and connection.last_input == 1.0 and connection.prepared == 1
    connection.receive(b"\nwait\nc\n", 2.0)
    assert connection.ran == [b"a", b"b"] and list(connection._unread) == [b"wait", b"c"]
    assert connection.last_input == 2.0 and connection.prepared == 2


def test_a_closing_connection_reads_nothing_more_but_notes_when_the_client_last_sent():
    connection = Connection()
    connection.outbox.close_now("bye")
    connection.receive(b"a\n", 3.0)
    assert connection.ran == [] and connection.prepared == 0 and connection.parser.held == b""
    assert connection.last_input == 3.0
