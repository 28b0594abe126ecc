"""The multicast extension's pure part: when a joined client gives the group up.

A backbone started with ``--multicast GROUP:PORT`` sends each DELIVER
datagram once to the group; a client that joined sets KEEPALIVE flag
MULTICAST and gets no unicast DELIVERs from then on (docs/protocol.md).  If
the group does not reach the client (the wrong interface, a switch that
snoops IGMP without a querier and prunes the port), the client would get
nothing at all, so :class:`GroupWatch` notices that the backbone's HEAD moves
on while the group stays silent and tells the connection to fall back to
unicast.  Nothing is lost in the switch: the messages the group never brought
are holes below HEAD, which the tracker REQUESTs like any other loss.
"""
from __future__ import annotations

from fyrehose.protocol.codec import Address

FALLBACK_INTERVALS = 4  # keepalive intervals of a silent group (while HEAD advances) before falling back


class GroupWatch:
    """Whether a joined group still brings what the backbone sequences; pure (time is passed in).

    The group counts as silent once a KEEPALIVE-ACK announces a HEAD beyond
    the highest sequence the group brought (or beyond the first HEAD seen,
    for what was sequenced before the join) and no group datagram arrived
    since; ``after`` seconds of that and the client falls back.  An idle
    backbone (HEAD not moving) never looks silent, and one lost datagram is
    forgotten at the next one that arrives.
    """

    def __init__(self, after: float) -> None:
        self.after = after
        self.joined = True
        self.high: int | None = None  # highest sequence the group brought, or the HEAD at the join
        self.silent_since: float | None = None

    def datagram(self, last_seq: int) -> None:
        """A DELIVER datagram arrived on the group; ``last_seq`` is its highest sequence."""
        self.silent_since = None
        if self.high is None or last_seq > self.high:
            self.high = last_seq

    def head(self, head: int, now: float) -> bool:
        """The backbone's HEAD from a KEEPALIVE-ACK; True once: the group is given up, fall back to unicast."""
        if not self.joined:
            return False
        if self.high is None:
            self.high = head  # sequenced before the join: never expected from the group
            return False
        if head <= self.high:
            self.silent_since = None
            return False
        if self.silent_since is None:
            self.silent_since = now
            return False
        if now - self.silent_since < self.after:
            return False
        self.joined = False
        return True


def fallback_notice(group: Address, backbone: Address) -> str:
    """The one line a driver prints when its connection fell back to unicast."""
    return (f"fyrehose: nothing arrived on multicast group {group[0]}:{group[1]} while the backbone at "
            f"{backbone[0]}:{backbone[1]} sequenced on; falling back to unicast (check the interface, and IGMP "
            "snooping and its querier on the switches: docs/operations.md)")
