"""Multicast delivery end to end, only inside a network namespace each test creates.

The backbone runs in the namespace (``ip netns exec``) and every client
socket is made there too (``MulticastNamespace.inside``): the group
(239.255.0.0/16, TTL 1) is routed on the namespace's own loopback, with the
interface set explicitly on both sides, and no multicast socket ever exists
in the host's namespace.  Expected: joined subscribers get every message in
order from one copy on the group; unicast subscribers alongside them are
unaffected; what the group loses is repaired by REQUEST (FORWARD from a peer,
or the backbone's last-resort re-delivery); a group that never arrives makes
the client fall back to unicast with nothing lost; datagrams on the group from
any other address are dropped and counted; a backbone killed with SIGKILL and
restarted goes on sending to the group with numbers never reused.
"""
from __future__ import annotations

import socket
import subprocess
import time

import pytest

from fyrehose import Client
from fyrehose.protocol import codec
from fyrehose.protocol.tracker import Message
from fyrehose.runtime.process import ChildProcess

from gateway_support import RawNats
from netns import MulticastNamespace, namespaces_available
from support import EVENT_WITHIN, FYREHOSE, READY_WITHIN, BackboneProcess, take, wait_until, workers_of

pytestmark = pytest.mark.skipif(namespaces_available() is not None, reason=str(namespaces_available()))

GROUP = "239.255.23.1"
GROUP_PORT = 23231
MULTICAST = f"{GROUP}:{GROUP_PORT}"
SEND_ON_LOOPBACK = ["--multicast", MULTICAST, "--multicast-ttl", "1", "--multicast-interface", "127.0.0.1"]


@pytest.fixture
def namespace():
    with MulticastNamespace() as created, created.inside():
        yield created


@pytest.fixture(params=[0, 2], ids=lambda workers: f"workers={workers}")
def backbone(request, namespace, tmp_path):
    process = BackboneProcess(tmp_path / "state", workers=request.param, prefix=namespace.prefix,
                              extra=SEND_ON_LOOPBACK)
    try:
        yield process.start()
    finally:
        process.kill()


def take_through(stream, last: int, timeout: float) -> list:
    """Events up to and including the message ``last`` (losses reported on the way included)."""
    got: list = []
    deadline = time.monotonic() + timeout
    while not (got and isinstance(got[-1], Message) and got[-1].seq >= last) and time.monotonic() < deadline:
        event = stream.get(timeout=max(0.01, deadline - time.monotonic()))
        if event is not None:
            got.append(event)
    return got


def wait_for_joined(backbone: BackboneProcess, count: int) -> None:
    """Until the backbone counts ``count`` subscribers that take the group (their KEEPALIVEs arrived)."""
    wait_until(lambda: backbone.metric("fyrehose_multicast_subscribers") == count, EVENT_WITHIN,
               f"the backbone counting {count} multicast subscribers")


def test_joined_and_unicast_subscribers_all_get_every_message_in_order(backbone):
    with Client(backbone.addr, multicast=MULTICAST) as first, Client(backbone.addr, multicast=MULTICAST) as second, \
            Client(backbone.addr, multicast=MULTICAST, batch=False) as third, \
            Client(backbone.addr) as unicast, Client(backbone.addr, batch=False) as plain, \
            Client(backbone.addr, subscribe=False) as publisher:
        wait_for_joined(backbone, 3)
        clients = [first, second, third, unicast, plain]
        streams = [client.subscribe() for client in clients]
        payloads = [b"m%04d" % i for i in range(400)]
        seqs = [publisher.publish(p) for p in payloads[:50]]
        seqs += publisher.publish_many(payloads[50:])
        events = [take(stream, len(payloads)) for stream in streams]
    for got in events:
        assert [(e.seq, e.data) for e in got] == list(zip(seqs, payloads))
    for joined in (first, second, third):
        assert joined.stats["multicast datagrams"] > 0 and joined.stats["multicast fallbacks"] == 0
    for client in (unicast, plain):
        assert client.stats["multicast datagrams"] == 0
    assert backbone.metric("fyrehose_multicast_datagrams_total") > 0
    # the group's one copy, plus one per unicast subscriber: joined subscribers got no unicast DELIVERs
    wait_until(lambda: backbone.metric("fyrehose_delivered_total") >= len(payloads) * 3, EVENT_WITHIN, "the counters settling")
    assert backbone.metric("fyrehose_delivered_total") == len(payloads) * 3


def test_loss_on_the_group_is_repaired_by_request_and_forward(backbone):
    with Client(backbone.addr, multicast=MULTICAST) as lossy, Client(backbone.addr, multicast=MULTICAST) as peer, \
            Client(backbone.addr, subscribe=False) as publisher:
        wait_for_joined(backbone, 2)
        stream, _ = lossy.subscribe(), peer.subscribe()
        seqs = publisher.publish_many([b"before %d" % i for i in range(20)])
        assert len(take(stream, 20)) == 20
        leave_group_for_a_moment(lossy, backbone, lambda: seqs.extend(
            publisher.publish_many([b"gone %d" % i for i in range(30)])))
        seqs += publisher.publish_many([b"after %d" % i for i in range(20)])
        got = take(stream, 50)
    assert [e.seq for e in got] == seqs[20:] and all(isinstance(e, Message) for e in got)
    assert lossy.stats["requests"] > 0
    assert backbone.metric("fyrehose_forwards_total") > 0  # the peer holds what the group brought it


def test_loss_on_the_group_without_any_journaling_peer_is_redelivered_by_the_backbone(backbone):
    with Client(backbone.addr, multicast=MULTICAST, journal=False) as lossy, \
            Client(backbone.addr, subscribe=False) as publisher:
        wait_for_joined(backbone, 1)
        stream = lossy.subscribe()
        seqs = publisher.publish_many([b"before %d" % i for i in range(10)])
        assert len(take(stream, 10)) == 10
        leave_group_for_a_moment(lossy, backbone, lambda: seqs.extend(
            publisher.publish_many([b"gone %d" % i for i in range(30)])))
        seqs += publisher.publish_many([b"after %d" % i for i in range(10)])
        got = take(stream, 40)
    assert [e.seq for e in got] == seqs[10:] and all(isinstance(e, Message) for e in got)
    assert backbone.metric("fyrehose_redelivered_total") >= 30
    assert backbone.metric("fyrehose_forwards_total") == 0


def leave_group_for_a_moment(client: Client, backbone: BackboneProcess, meanwhile) -> None:
    """The kernel stops handing ``client`` the group (as a switch that pruned its port would) while
    ``meanwhile`` publishes and the backbone sends it to the group, well within the fallback's silence;
    then the client is a member again."""
    membership = socket.inet_aton(GROUP) + socket.inet_aton("127.0.0.1")
    sock = client._loop.group
    assert sock is not None
    sent = backbone.metric("fyrehose_multicast_datagrams_total")
    sock.setsockopt(socket.IPPROTO_IP, socket.IP_DROP_MEMBERSHIP, membership)
    try:
        meanwhile()
        wait_until(lambda: backbone.metric("fyrehose_multicast_datagrams_total") > sent, EVENT_WITHIN,
                   "the backbone sending to the group")
    finally:
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, membership)


def test_a_group_that_never_arrives_falls_back_to_unicast_and_loses_nothing(namespace, tmp_path, capfd):
    """The backbone sends the group out of the veth interface; the client joined it on loopback, the
    interface that routes to the backbone: nothing arrives, as behind a switch that drops the group."""
    interface = MulticastNamespace.VETH[1].split("/")[0]
    backbone = BackboneProcess(tmp_path / "state", prefix=namespace.prefix,
                               extra=["--multicast", MULTICAST, "--multicast-interface", interface]).start()
    try:
        with Client(backbone.addr, multicast=MULTICAST) as joined, \
                Client(backbone.addr, subscribe=False) as publisher:
            wait_for_joined(backbone, 1)
            stream = joined.subscribe(on_loss="yield")
            seqs: list[int] = []
            deadline = time.monotonic() + 15
            while not joined.stats["multicast fallbacks"] and time.monotonic() < deadline:
                seqs += publisher.publish_many([b"x%d" % len(seqs) for _ in range(5)])  # HEAD advances
                time.sleep(0.05)
            assert joined.stats["multicast fallbacks"] == 1, "the client never fell back"
            seqs += publisher.publish_many([b"after the fallback %d" % i for i in range(20)])
            got = take(stream, len(seqs))
            wait_until(lambda: backbone.metric("fyrehose_multicast_subscribers") == 0, EVENT_WITHIN,
                       "the backbone no longer counting the client as joined")
    finally:
        backbone.kill()
    assert [e.seq for e in got] == seqs and all(isinstance(e, Message) for e in got)
    assert joined.stats["multicast datagrams"] == 0
    notices = [line for line in capfd.readouterr().err.splitlines() if "falling back to unicast" in line]
    assert len(notices) == 1 and MULTICAST in notices[0]


def test_a_gateway_whose_group_never_arrives_falls_back_and_lives_on(namespace, tmp_path):
    """As above, for a gateway: leaving the group is no dead worker, and its clients get the stream by unicast."""
    interface = MulticastNamespace.VETH[1].split("/")[0]
    backbone = BackboneProcess(tmp_path / "state", prefix=namespace.prefix,
                               extra=["--multicast", MULTICAST, "--multicast-interface", interface]).start()
    gateway = ChildProcess(namespace.prefix + FYREHOSE + ["gateway", "nats", "--listen", "127.0.0.1:0", "--backbone",
                                                          backbone.address, "--multicast", MULTICAST],
                           tmp_path / "gateway.log")
    try:
        _, port = gateway.wait_ready(READY_WITHIN)
        nats = RawNats(("127.0.0.1", port))
        nats.send(b'CONNECT {"verbose":false}\r\nSUB after.> 1\r\nPING\r\n')
        assert nats.line() == b"PONG"
        with Client(backbone.addr, subscribe=False) as publisher:
            deadline = time.monotonic() + 15
            while "falling back to unicast" not in gateway.output() and time.monotonic() < deadline:
                publisher.publish(b"x", subject="before.x")  # HEAD advances
                time.sleep(0.05)
            assert "falling back to unicast" in gateway.output(), "the gateway never fell back"
            publisher.publish(b"by unicast", subject="after.x")
        assert nats.line() == b"MSG after.x 1 10" and nats.line() == b"by unicast"
        assert gateway.alive()
        nats.sock.close()
        assert gateway.stop(10) == 0
        assert "died" not in gateway.output()
    finally:
        gateway.kill()
        backbone.kill()


def test_datagrams_on_the_group_from_another_address_are_dropped_and_counted(backbone):
    with Client(backbone.addr, multicast=MULTICAST) as joined, Client(backbone.addr, subscribe=False) as publisher:
        wait_for_joined(backbone, 1)
        stream = joined.subscribe()
        first = publisher.publish(b"genuine 1")
        forged = [codec.encode_deliver(seq, b"forged") for seq in range(first + 1, first + 6)]
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as forger:
            forger.bind(("127.0.0.2", backbone.port))  # the backbone's port, a second address of the namespace
            forger.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton("127.0.0.1"))
            forger.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 1)
            for datagram in forged:
                forger.sendto(datagram, (GROUP, GROUP_PORT))
            forger.sendto(codec.pack([codec.Deliver(first + 1, b"forged")] * 2), (GROUP, GROUP_PORT))
        wait_until(lambda: joined.stats["multicast from strangers"] >= len(forged) + 1, EVENT_WITHIN,
                   "the forged datagrams arriving")
        seqs = [first] + publisher.publish_many([b"genuine %d" % i for i in range(2, 7)])
        got = take(stream, len(seqs))
    assert [(e.seq, e.data) for e in got] == list(zip(seqs, [b"genuine %d" % i for i in range(1, 7)]))


def test_a_backbone_killed_and_restarted_goes_on_with_the_group_and_never_reuses_a_number(backbone):
    with Client(backbone.addr, multicast=MULTICAST) as joined, \
            Client(backbone.addr, subscribe=False, unreachable_after=15) as publisher:
        wait_for_joined(backbone, 1)
        stream = joined.subscribe(on_loss="yield")
        before = publisher.publish_many([b"before %d" % i for i in range(50)])
        assert [e.seq for e in take(stream, 50)] == before
        backbone.kill()
        backbone.start()  # same port, same state directory, same group
        wait_for_joined(backbone, 1)
        after = publisher.publish_many([b"after %d" % i for i in range(50)], timeout=10)
        got = [e for e in take_through(stream, after[-1], EVENT_WITHIN) if isinstance(e, Message)]
    assert min(after) > max(before)
    assert [e.seq for e in got] == after and [e.data for e in got] == [b"after %d" % i for i in range(50)]
    assert joined.stats["multicast fallbacks"] == 0


def test_fyrehose_sub_takes_the_group(backbone, namespace):
    with Client(backbone.addr, subscribe=False) as publisher:
        sub = subprocess.Popen(namespace.prefix + FYREHOSE + ["sub", "--backbone", backbone.address,
                                                              "--multicast", MULTICAST, "--count", "3"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            wait_for_joined(backbone, 1)
            seqs = publisher.publish_many([b"one", b"two", b"three"])
            out, err = sub.communicate(timeout=20)
        finally:
            sub.kill()
            sub.wait()
    assert sub.returncode == 0, err
    assert out.splitlines() == [f"{seq}\t{text}" for seq, text in zip(seqs, ["one", "two", "three"])]


@pytest.mark.parametrize("workers", ["0", "2"])
def test_a_backbone_that_cannot_send_from_the_interface_says_so_in_one_line(namespace, tmp_path, workers):
    result = subprocess.run(namespace.prefix + FYREHOSE + [
        "backbone", "--listen", "127.0.0.1:0", "--workers", workers, "--state-dir", str(tmp_path / "state"),
        "--multicast", MULTICAST, "--multicast-interface", "10.250.0.9"], capture_output=True, text=True, timeout=30)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"fyrehose backbone: error: cannot send to multicast group {MULTICAST} from 10.250.0.9: "
        "Cannot assign requested address"]


def test_a_gateway_takes_the_group_for_its_clients(backbone, namespace, tmp_path):
    gateway = ChildProcess(namespace.prefix + FYREHOSE + ["gateway", "nats", "--listen", "127.0.0.1:0", "--backbone",
                                                          backbone.address, "--multicast", MULTICAST],
                           tmp_path / "gateway.log")
    try:
        _, port = gateway.wait_ready(READY_WITHIN)
        wait_for_joined(backbone, 1)
        nats = RawNats(("127.0.0.1", port))
        nats.send(b'CONNECT {"verbose":false}\r\nSUB market.> 1\r\nPING\r\n')
        assert nats.line() == b"PONG"
        with Client(backbone.addr, subscribe=False) as publisher:
            publisher.publish(b"42.5", subject="market.eurusd")
        assert nats.line() == b"MSG market.eurusd 1 4" and nats.line() == b"42.5"
        assert backbone.metric("fyrehose_multicast_subscribers") == 1
        nats.sock.close()
        assert gateway.stop(10) == 0  # leaving the group on the way out is no dead worker
        assert "died" not in gateway.output()
    finally:
        gateway.kill()


def test_kill_9_of_the_fanout_worker_that_sends_the_group_is_survived(namespace, tmp_path):
    backbone = BackboneProcess(tmp_path / "state", workers=2, prefix=namespace.prefix,
                               extra=SEND_ON_LOOPBACK + ["--fanout", "2"]).start()
    try:
        with Client(backbone.addr, multicast=MULTICAST) as joined, Client(backbone.addr, subscribe=False) as publisher:
            wait_for_joined(backbone, 1)
            stream = joined.subscribe(on_loss="yield")
            seqs = publisher.publish_many([b"before %d" % i for i in range(20)])
            wait_until(lambda: "fh-fanout-0" in workers_of(backbone), EVENT_WITHIN, "fan-out worker 0 being named")
            sender = workers_of(backbone)["fh-fanout-0"]
            sender.kill()
            wait_until(lambda: (now := workers_of(backbone).get("fh-fanout-0")) is not None and now.pid != sender.pid,
                       EVENT_WITHIN, "fan-out worker 0 being restarted")
            seqs += publisher.publish_many([b"after %d" % i for i in range(20)])
            got = take_through(stream, seqs[-1], EVENT_WITHIN)
        assert [e.seq for e in got] == seqs and all(isinstance(e, Message) for e in got)
        assert backbone.metric('fyrehose_worker_restarts_total{worker="fanout-0"}') == 1
    finally:
        backbone.kill()


def test_a_journal_keeps_what_the_group_brought(backbone, namespace, tmp_path):
    directory = tmp_path / "journal"
    journal = ChildProcess(namespace.prefix + FYREHOSE + ["journal", "--backbone", backbone.address, "--dir",
                                                          str(directory), "--multicast", MULTICAST, "--no-parquet"],
                           tmp_path / "journal.log")
    try:
        journal.wait_ready(READY_WITHIN)
        wait_for_joined(backbone, 1)
        with Client(backbone.addr, subscribe=False) as publisher:
            seqs = publisher.publish_many([b"kept %d" % i for i in range(10)])
        inspect = FYREHOSE + ["journal", "inspect", str(directory), "--records", f"{seqs[0]}..{seqs[-1]}"]
        wait_until(lambda: subprocess.run(inspect, capture_output=True, text=True).stdout.count("kept") == 10, EVENT_WITHIN,
                   "the journal holding all ten messages")
        assert backbone.metric("fyrehose_multicast_datagrams_total") > 0
    finally:
        assert journal.stop(10) == 0
