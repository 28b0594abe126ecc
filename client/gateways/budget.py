"""A byte budget several connections share: what one may hold depends on what the others hold."""
from __future__ import annotations


class InputBudget:
    """Bytes all connections' unfinished input may hold together (incomplete commands, frames).

    Each connection is bounded on its own (one command, one frame), but a
    thousand connections each holding an incomplete megabyte are a gigabyte;
    so the gateway also bounds the sum, and a connection whose input would
    not fit is closed instead of buffered.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0

    def resize(self, held: int, wanted: int) -> bool:
        """Move one connection's claim from ``held`` to ``wanted`` bytes; False (nothing moved) if over the limit."""
        if wanted > held and self.used - held + wanted > self.limit:
            return False
        self.used += wanted - held
        return True
