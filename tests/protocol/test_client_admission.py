"""Who may say what to a client: pure rules, and a real client that a stranger tries to confuse."""
from __future__ import annotations

import socket
import subprocess
import sys
import textwrap
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fyrehose.drivers.client import Client
from fyrehose.protocol import codec
from fyrehose.protocol.admission import admit
from fyrehose.protocol.connection import BackboneConnection, ConnectionOptions
from fyrehose.protocol.publishing import Finished
from fyrehose.protocol.tracker import SequenceTracker, TrackerOptions
from fyrehose.subjects.auth import AuthDatabase, Authenticator, Credentials
from fyrehose.subjects.envelope import Envelope, encode
from fyrehose.subjects.session_table import LocalSession

from support import EVENT_WITHIN, run_cli, wait_until

BACKBONE = ("127.0.0.1", 2323)
STRANGER = ("127.0.0.1", 40000)

addresses = st.tuples(st.sampled_from(["127.0.0.1", "127.0.0.2", "10.0.0.1"]), st.integers(0, 65535))


@given(st.binary(max_size=64), addresses)
def test_any_datagram_from_anyone_gets_a_verdict(datagram, source):
    kind, from_backbone, drop = admit(datagram, source, BACKBONE)
    assert from_backbone == (source == BACKBONE)
    assert bool(kind) != bool(drop)  # handled as a frame type, or dropped with a reason


def test_only_the_backbone_acks_confirms_and_forwards():
    ack = codec.encode(codec.KeepaliveAck(token=bytes(16)))
    confirm = codec.encode_confirm(5, 9)
    forward = codec.encode(codec.Forward("127.0.0.1", 1, 1, 2))
    for datagram in (ack, confirm, forward):
        assert admit(datagram, BACKBONE, BACKBONE).kind == datagram[0]
        verdict = admit(datagram, STRANGER, BACKBONE)
        assert verdict.kind == 0 and verdict.drop.endswith("from strangers")
    deliver = codec.encode_deliver(1, b"x")
    assert admit(deliver, STRANGER, BACKBONE) == (codec.DELIVER, False, "")  # decided per sequence
    assert admit(b"", BACKBONE, BACKBONE).drop == "empty datagrams"
    assert admit(codec.encode_push(b"x"), BACKBONE, BACKBONE).drop == "unknown frame types"
    assert admit(b"\xff", STRANGER, BACKBONE).drop == "strangers' other datagrams"


def test_a_tracker_awaits_only_requested_unfilled_holes():
    tracker = SequenceTracker(1, request_delay=0.01)
    tracker.deliver(1, b"a", 0.0)
    tracker.deliver(5, b"e", 0.0)  # hole 2..4, not requested yet
    assert not any(tracker.awaits(seq) for seq in range(1, 7))
    requests, _ = tracker.handle_timers(1.0)
    assert requests == [(2, 4)]
    assert [seq for seq in range(1, 7) if tracker.awaits(seq)] == [2, 3, 4]
    tracker.deliver(3, b"c", 1.0)
    assert [seq for seq in range(1, 7) if tracker.awaits(seq)] == [2, 4]


def test_an_authenticating_client_fills_a_hole_only_with_what_verifies():
    db = AuthDatabase()
    for user in ("paul", "sam"):
        db.add(user, "quotes", f"password of {user}")
    paul_session = LocalSession("paul")
    paul = Authenticator(Credentials(db, "paul", "quotes"), paul_session)
    sam = Authenticator(Credentials(db, "sam", "quotes"), LocalSession("sam"))
    genuine = encode(paul.sign(paul_session.stamp(Envelope("q.x", b"genuine"))))
    forged = genuine[:-40] + b"forged!!" + genuine[-32:]  # the data changed, the digest kept
    unsigned = encode(Envelope("q.x", b"unsigned"))
    options = ConnectionOptions(flags=codec.FLAG_BATCH, tracker=TrackerOptions(request_delay=0.01))
    connection = BackboneConnection(BACKBONE, options, vouch=sam.vouches)
    connection.track(1)
    connection.receive(codec.encode_deliver(1, b"a"), BACKBONE, 0.0)
    connection.receive(codec.encode_deliver(3, b"c"), BACKBONE, 0.0)
    sends, _ = connection.handle_timers(1.0)
    assert any(datagram[0] == codec.REQUEST for datagram in sends)
    for payload in (forged, unsigned, b"raw"):  # a peer racing the genuine re-delivery
        incoming = connection.receive(codec.encode_deliver(2, payload), STRANGER, 1.0)
        assert incoming.stored == [] and incoming.events == []
    assert connection.stats["unverified re-deliveries"] == 3
    assert connection.tracker.awaits(2)  # still open: asked again when its timer runs out
    incoming = connection.receive(codec.encode_deliver(2, genuine), STRANGER, 1.0)
    assert incoming.stored == [(2, genuine)]
    assert [event.seq for event in incoming.events] == [2, 3]
    assert connection.receive(codec.encode_deliver(2, genuine), BACKBONE, 1.0).stored == []  # already filled


def test_vouching_is_read_only_and_refuses_the_unverifiable():
    db = AuthDatabase()
    db.add("paul", "quotes", "p")
    db.add("sam", "quotes", "s")
    paul_session, sam_session = LocalSession("paul"), LocalSession("sam")
    paul = Authenticator(Credentials(db, "paul", "quotes"), paul_session)
    sam = Authenticator(Credentials(db, "sam", "quotes"), sam_session)
    signed = paul.sign(paul_session.stamp(Envelope("q.x", b"v")))
    assert sam.vouches(encode(signed))
    assert sam.vouches(encode(sam.sign(sam_session.stamp(Envelope("q.y", b"own")))))
    assert not sam.vouches(encode(replace(signed, data=b"w")))
    assert not sam.vouches(encode(replace(signed, session="paul")))  # not a session name
    impostor = AuthDatabase()
    impostor.add("mallory", "quotes", "m")
    mallory_session = LocalSession("mallory")
    mallory = Authenticator(Credentials(impostor, "mallory", "quotes"), mallory_session)
    assert not sam.vouches(encode(mallory.sign(mallory_session.stamp(Envelope("q.x", b"v")))))  # unknown user
    assert not sam.vouches(b"") and not sam.vouches(b"raw payload")
    assert sam.check(signed, 0).reason == "untrusted" and sam.stats["replayed"] == 0  # vouching moved nothing


def test_a_stranger_cannot_stop_confuse_or_inject(backbone):
    with Client(backbone.address) as client, \
            socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as stranger:
        assert client.address[0] == "127.0.0.1"  # bound where the backbone routes, not 0.0.0.0
        stream = client.subscribe()
        first = client.publish(b"real-1")
        forged = [
            b"",  # once ended the receive thread
            b"\x01", b"\x20", b"\x40\x00", b"\x08" * 7, b"\xff" * 100,
            codec.encode_deliver(first + 1, b"forged-next"),
            codec.encode_deliver(first + 1000, b"forged-future"),
            codec.encode_deliver(first, b"forged-again"),
            codec.encode(codec.KeepaliveAck(token=bytes(16), head=first + 50)),
            codec.encode_confirm(1, 1),
            codec.encode(codec.Forward("127.0.0.1", stranger.getsockname()[1] or 9, 1, first)),
        ]
        for datagram in forged * 3:
            stranger.sendto(datagram, client.address)
        assert wait_until(lambda: client.stats["DELIVERs from strangers"] >= 9)
        second = client.publish(b"real-2")
        got = [next(stream), next(stream)]
        assert [(m.seq, m.data) for m in got] == [(first, b"real-1"), (second, b"real-2")]
        assert second == first + 1  # the forged ACK's HEAD invented no hole
        held = dict(client.held.held(1, second + 2000))
        assert set(held.values()) == {b"real-1", b"real-2"}
        assert client.stats["empty datagrams"] == 3
        # a bare type byte and a well-formed frame each, three times over
        assert client.stats["KEEPALIVE-ACK from strangers"] == 6
        assert client.stats["CONFIRM from strangers"] == 6
        assert client.stats["FORWARD from strangers"] == 6
        assert client.stats["forwarded"] == 0
        assert client.reachable


def test_a_forged_confirm_completes_no_publish():
    connection = BackboneConnection(BACKBONE, ConnectionOptions(flags=codec.FLAG_NOSUBSCRIBE))
    number, datagrams = connection.publishes.start([b"x", b"y"], 0.0, 5.0)
    (_, _, first), (_, _, second) = codec.scan(datagrams[0], codec.PUSH)[0]
    confirms = codec.encode_confirm(first, 5) + codec.encode_confirm(second, 6)
    assert connection.receive(confirms, STRANGER, 0.1).published == []
    assert connection.stats["CONFIRM from strangers"] == 1 and len(connection.publishes) == 1
    assert connection.receive(confirms, BACKBONE, 0.2).published == [Finished(number, [5, 6])]
    assert connection.receive(confirms, BACKBONE, 0.3).published == []  # a repeated CONFIRM finishes nothing twice


def test_a_service_whose_receive_thread_dies_exits_with_one_line(backbone_factory):
    backbone = backbone_factory()
    script = textwrap.dedent(f"""
        import socket, time
        from fyrehose.drivers.client import Client
        from fyrehose.runtime.fatal import exit_on_thread_death
        exit_on_thread_death("sub")
        client = Client({backbone.address!r})
        def broken(*args):
            raise RuntimeError("bug in handling")
        client._loop.datagram = broken
        poke = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        for _ in range(50):
            poke.sendto(b"x", client.address)
            time.sleep(0.1)
        print("still alive")
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 70, proc.stderr
    assert "still alive" not in proc.stdout
    lines = proc.stderr.strip().splitlines()
    assert lines == ["fyrehose sub: error: thread fyrehose-client receive died: RuntimeError: bug in handling"]


def test_bind_is_checked_in_one_line():
    result = run_cli("sub", "--bind", "nowhere.invalid:1", "--count", "1", timeout=30)
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1
    assert b"--bind" in result.stderr


def test_sub_listens_where_bind_says(backbone_factory):
    backbone = backbone_factory()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with Client(backbone.address, subscribe=False) as publisher:
        publisher.publish(b"before")
        result = subprocess.Popen(
            [sys.executable, "-m", "fyrehose.commands.main", "sub", "--backbone", backbone.address,
             "--bind", f"127.0.0.1:{port}", "--count", "1", "--timeout", "20"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert wait_until(lambda: _port_taken(port), EVENT_WITHIN)
            # bound is not yet subscribed: publish until the subscriber has one (it exits after it)
            assert wait_until(lambda: publisher.publish(b"hello") and result.poll() is not None, EVENT_WITHIN, interval=0.2)
            out, err = result.communicate(timeout=20)
        finally:
            if result.poll() is None:
                result.kill()
                result.wait()
    assert result.returncode == 0, err
    assert out.strip().endswith("hello")


def _port_taken(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return True
        return False


@given(st.integers(0, 40), st.lists(st.integers(1, 3), min_size=1, max_size=40), st.integers(1, 1 << 40))
def test_a_datagram_of_one_frame_size_is_taken_as_frame_by_frame(size, steps, first):
    """The unscanned path for frames of one size agrees with one datagram per frame, gaps included."""
    seqs = [first]
    for step in steps[1:]:
        seqs.append(seqs[-1] + step)  # a step above 1 leaves a hole
    frames = [codec.encode_deliver(seq, bytes([seq & 0xFF]) * size) for seq in seqs]
    packed, single = (BackboneConnection(BACKBONE, ConnectionOptions(flags=codec.FLAG_BATCH)) for _ in range(2))
    for connection in (packed, single):
        connection.track(first)
    got = packed.receive(b"".join(frames), BACKBONE, 0.0)
    want_stored, want_events = [], []
    for frame in frames:
        incoming = single.receive(frame, BACKBONE, 0.0)
        want_stored += incoming.stored
        want_events += incoming.events
    assert got.stored == want_stored and got.events == want_events
    assert packed.tracker.next == single.tracker.next
    assert packed.stats["delivered frames"] == single.stats["delivered frames"] == len(frames)


def test_a_repeated_forward_is_served_once_until_the_driver_is_done_with_it():
    connection = BackboneConnection(BACKBONE, ConnectionOptions(flags=codec.FLAG_BATCH))
    forward = codec.encode(codec.Forward("127.0.0.1", 4000, 5, 9))
    first = connection.receive(forward, BACKBONE, 0.0).forwards
    assert first == [codec.Forward("127.0.0.1", 4000, 5, 9)]
    assert connection.receive(forward, BACKBONE, 0.1).forwards == []  # a retried REQUEST: the answer is on its way
    assert connection.stats["duplicate forwards"] == 1
    connection.forward_done(first[0])
    assert connection.receive(forward, BACKBONE, 0.2).forwards == first  # asked again later: served again
    ignoring = BackboneConnection(BACKBONE, ConnectionOptions(flags=codec.FLAG_NOJOURNAL))
    assert ignoring.receive(forward, BACKBONE, 0.0).forwards == [] and ignoring.stats["forwards ignored"] == 1


@pytest.mark.parametrize(("module", "target", "argv", "worker"), [
    ("fyrehose.drivers.link", "BackboneLink._handle_timers", ["gateway", "redis", "--listen", "127.0.0.1:0"],
     "gateway backbone receive"),
    ("fyrehose.journal.service", "JournalService._maintain", ["journal", "--dir", "{tmp}"], "journal maintenance"),
])
def test_a_real_service_whose_worker_dies_exits_with_one_line(backbone_factory, tmp_path, module, target, argv, worker):
    """The real commands, one of their workers (a greenlet, a thread) given a bug: never half-alive."""
    backbone = backbone_factory()
    owner, method = target.split(".")
    command = argv[0]
    argv = [arg.replace("{tmp}", str(tmp_path / "journal")) for arg in argv] + ["--backbone", backbone.address]
    script = textwrap.dedent(f"""
        import sys
        import {module} as module
        from fyrehose.commands.main import main
        def broken(self, *args):
            raise RuntimeError("a bug")
        getattr(module.{owner}, {method!r})  # the worker must exist: replacing a name nobody calls proves nothing
        setattr(module.{owner}, {method!r}, broken)
        sys.exit(main({argv!r}))
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 70, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == f"fyrehose {command}: error: thread {worker} died: RuntimeError: a bug"
