"""Network namespaces shaped for the tests: a loopback behind a token bucket filter (tc tbf), or one
where multicast may flow without ever touching the host's own namespace.

Loopback in the test's normal namespace never fills a UDP send buffer: a
datagram is handed to the receiver at once and stops counting against the
sender.  Behind a tbf qdisc with a queue longer than the sender's buffer,
datagrams wait in the queue while still charged to the sending socket, so a
fast sender gets real EAGAIN from ``sendto`` (as on a slow NIC or a congested
uplink).  A multicast namespace keeps every group socket of a test
away from the host's interfaces (TTL 1, interface set explicitly).  The
namespaces themselves are :class:`fyrehose.tools.bench.netns.Namespace`: deleted
on exit, with every process still in them left to the caller to stop.
"""
from __future__ import annotations

from fyrehose.tools.bench import netns
from fyrehose.tools.bench.netns import Namespace, run


def namespaces_available() -> str | None:
    """Why this machine cannot create a shaped namespace (root, ``ip`` and ``tc``), or None when it can."""
    return netns.namespaces_available("tc")


class ShapedNamespace(Namespace):
    """``tbf rate RATE burst BURST limit LIMIT`` on the namespace's loopback."""

    def __init__(self, rate: str = "20mbit", burst: str = "64kb", limit: str = "64mb") -> None:
        super().__init__()
        self.qdisc = ["tbf", "rate", rate, "burst", burst, "limit", limit]

    def configure(self) -> None:
        run("tc", "-n", self.name, "qdisc", "add", "dev", "lo", "root", *self.qdisc)


class MulticastNamespace(Namespace):
    """Multicast kept inside: the group is routed on this namespace's loopback, and a veth pair
    (``mc0`` 10.213.0.1/24, ``mc1`` 10.213.0.2/24) is a second interface that the group is not sent on."""

    VETH = ("mc0", "10.213.0.1/24", "mc1", "10.213.0.2/24")

    def configure(self) -> None:
        first, first_net, second, second_net = self.VETH
        run("ip", "-n", self.name, "link", "add", first, "type", "veth", "peer", "name", second)
        for device, network in ((first, first_net), (second, second_net)):
            run("ip", "-n", self.name, "addr", "add", network, "dev", device)
            run("ip", "-n", self.name, "link", "set", device, "up")
