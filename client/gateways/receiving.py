"""How a parsing gateway connection takes its client's bytes: written once for Redis, NATS and Marlin.

Each of these connections parses what arrives into items (commands,
operations, frames: :mod:`fyrehose.gateways.incremental`) and runs them in
order as far as it can; an item that must wait for the backbone or a
credential's check stays unread (the driver reads nothing more meanwhile:
``paused``).  What is the same for all three is here: the time of the last
input (what an idle client's silence counts from), nothing read once the
connection is closing, the parsed items queued behind those not yet run, then
running them.  Each protocol says how to run them (``_run``) and what its
parser must know first (``_before_parsing``).
"""
from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Any, Generic, Protocol, TypeVar

from fyrehose.gateways.outbox import Outbox

Item = TypeVar("Item")
Item_co = TypeVar("Item_co", covariant=True)


class Parser(Protocol[Item_co]):
    """An incremental parser: bytes in any chunking, the items completed so far out."""

    def feed(self, data: bytes) -> Iterable[Item_co]: ...


P = TypeVar("P", bound=Parser[Any])  # whose items are the connection's Items


class ParsingConnection(Generic[P, Item]):
    """The ``receive`` of a connection whose ``parser`` (a ``P``) makes its client's bytes into ``Item`` s."""

    outbox: Outbox
    parser: P
    last_input: float  # when the client last sent anything
    _unread: deque[Item]  # parsed, not yet run

    def receive(self, data: bytes, now: float) -> None:
        """The client's bytes, received at ``now``."""
        self.last_input = now
        if self.outbox.closing is not None:
            return
        self._before_parsing()
        self._unread.extend(self.parser.feed(data))
        self._run()

    def _before_parsing(self) -> None:
        """What the parser must know before it reads these bytes (nothing, but for Redis)."""

    def _run(self) -> None:
        """Run the unread items, up to one that must wait."""
        raise NotImplementedError
