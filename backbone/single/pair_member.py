"""One member of a hot standby pair, driven by the single-process backbone's loop (``--pair``/``--peer``).

The member owns the pair socket and the role.  As primary it sends every
sequenced entry to the standby as RECORDs before the entry's DELIVERs and
CONFIRMs leave, and holds output back while the pure
:class:`~fyrehose.backbone.pair.primary.ReplicationSource` says so; as standby
it follows with a :class:`~fyrehose.backbone.pair.standby.ReplicaFollower` and
does not read the client socket at all (datagrams that reach a standby wait in
the kernel for its promotion).  keepalived changes the role by signal
(SIGUSR1 promote, SIGUSR2 demote) and reads it back from ``STATE_DIR/role``
(docs/operations.md, "A hot standby pair").
"""
from __future__ import annotations

import os
import socket
from collections import deque

from fyrehose.backbone.core import Backbone, Outbox
from fyrehose.backbone.host.statefile import ReservationWriter, StateError
from fyrehose.backbone.host.udp import bind_udp, send_all
from fyrehose.backbone.pair import frames
from fyrehose.backbone.pair.primary import ReplicationSource
from fyrehose.backbone.pair.standby import ReplicaFollower
from fyrehose.backbone.sequence_counter import SequenceCounter
from fyrehose.protocol import codec
from fyrehose.protocol.codec import Address
from fyrehose.runtime.durable import replace_atomically

STATE_EVERY = 0.02  # heartbeat of both members (STATE from the primary, ACK from the standby)
MEMBERS_EVERY = 0.25  # the primary's client table goes to the standby this often
PRIMARY, STANDBY, FENCED = "primary", "standby", "fenced"
RECV_SIZE = 65536


class PairMember:
    def __init__(self, backbone: Backbone, reservations: ReservationWriter, directory: os.PathLike | str,
                 client_sock: socket.socket, pair: Address, peer: Address, *, sync: bool, timeout: float,
                 key: bytes | None = None) -> None:
        self.backbone = backbone
        self.client_sock = client_sock
        self.reservations = reservations
        self.directory = os.fspath(directory)
        self.peer = peer
        self.service: Address = client_sock.getsockname()  # the virtual IP: recovered DELIVERs come back to it
        self.sync = sync
        self.timeout = timeout
        self.key = key  # --pair-key: every pair datagram sealed with it, and only sealed ones taken
        self.sock = bind_udp(pair)
        self.address = self.sock.getsockname()
        self.counters = backbone.counters
        self.epoch = self._read_epoch()
        self.role = STANDBY
        self.follower = ReplicaFollower(self.epoch, reservations.durable)
        self._fenced_by = 0  # the epoch that made this primary stand down: unfit until it follows that epoch
        self.source: ReplicationSource | None = None
        self._held: deque[tuple[int, list[tuple[bytes | memoryview, Address]]]] = deque()  # gated output
        self._next_state = 0.0
        self._next_members = 0.0
        self._wanted = 0
        self._delivered = 0  # the last sequence whose output left (STATE tells the standby)
        self.requested: str | None = None  # a role asked for by signal, applied by the loop
        self._write(os.path.join(self.directory, "pid"), f"{os.getpid()}\n")
        self._write_role()

    # ------------------------------------------------------------ files

    def _read_epoch(self) -> int:
        path = os.path.join(self.directory, "epoch")
        try:
            with open(path) as file:
                text = file.read().strip()
        except FileNotFoundError:
            return 0
        if not text.isdigit() or int(text) > frames.MAX_EPOCH:
            raise StateError(f"{path} does not hold an epoch: {text[:40]!r}")
        return int(text)

    @staticmethod
    def _write(path: str, text: str) -> None:
        replace_atomically(path, text.encode())  # type: ignore[arg-type]

    def _write_role(self) -> None:
        self._written_role = self._role_now()
        self._write(os.path.join(self.directory, "role"), self._written_role + "\n")

    def _role_now(self) -> str:
        """``fenced`` for a standby not fit to take over yet (keepalived will not make this host master): one
        that does not hold what its primary issued, is not attached, or stood down for a newer epoch that it
        does not follow yet."""
        if self.role != STANDBY:
            return self.role
        follower = self.follower
        if self._fenced_by:
            if follower.primary is None or follower.epoch < self._fenced_by or not follower.fit:
                return FENCED
            self._fenced_by = 0
        return STANDBY if follower.fit else FENCED

    # ------------------------------------------------------------ input

    @property
    def primary(self) -> bool:
        return self.role == PRIMARY

    def receive(self, now: float) -> None:
        """Everything the pair socket holds."""
        acked = False
        for _ in range(4096):
            try:
                data, source = self.sock.recvfrom(RECV_SIZE)
            except BlockingIOError:
                break
            except OSError:
                self.counters["drop:pair receive error"] += 1
                continue
            if source != self.peer:
                self.counters["drop:pair foreign source"] += 1
                continue
            if self.key is not None:
                opened = frames.unseal(data, self.key)
                if opened is None:
                    self.counters["drop:pair bad digest"] += 1
                    continue
                data = opened
            frame = frames.decode(data)
            if isinstance(frame, str):
                self.counters["drop:pair " + frame] += 1
                continue
            acked |= self._take(frame, now)
        if acked:
            self.follower.persisted_up_to(self.reservations.durable)
            self._send([self.follower.ack()])

    def _take(self, frame: frames.PairFrame, now: float) -> bool:
        """Apply one pair frame; True when the standby owes an ACK."""
        if self.role == PRIMARY:
            source = self.source
            assert source is not None
            if frame.epoch > self.epoch or (isinstance(frame, frames.State) and frame.role == frames.ROLE_PRIMARY
                                            and frame.epoch == self.epoch and self.peer > self.address):
                self._fence(frame.epoch)  # a newer epoch exists: stop at once, follow it
                return self._take(frame, now)
            if frame.epoch != self.epoch:
                self.counters["drop:pair old epoch"] += 1
            elif isinstance(frame, frames.Ack):
                source.on_ack(frame, self.backbone.sequence.last_issued, now)
                self._release(now)
            elif isinstance(frame, frames.Replay):
                records = source.replay(frame)
                self.counters["pair replayed"] += len(records)
                self._send(records)
            return False
        follower = self.follower
        if frame.epoch < follower.epoch:
            self.counters["drop:pair old epoch"] += 1
            return False
        if isinstance(frame, frames.State) and frame.role == frames.ROLE_PRIMARY:
            follower.newer(frame.epoch)
            follower.on_state(frame, now)
            self._adopt(frame, now)
            if frame.want > self._wanted:
                self._wanted = frame.want
                self.reservations.submit(frame.want)
            return True
        if isinstance(frame, frames.Record) and frame.epoch == follower.epoch:
            for record in follower.on_record(frame, now):
                self.backbone.hold_replica(record.frames, record.last - record.first + 1, record.source,
                                           record.runs, now)
            return True
        return False

    def _adopt(self, state: frames.State, now: float) -> None:
        clients = self.backbone.clients
        for member in state.members:
            clients.adopt(member.addr, member.flags, now - member.age_ms / 1000.0 + clients.lifetime)

    # ------------------------------------------------------------ output

    def _send(self, datagrams: list[bytes]) -> None:
        key = self.key
        if key is not None:
            datagrams = [frames.seal(datagram, key) for datagram in datagrams]
        send_all(self.sock, [(datagram, self.peer) for datagram in datagrams], self.counters)

    def replicate_and_send(self, out: Outbox, now: float) -> None:
        """The primary's flush: RECORDs to the standby first, then the output, once the standby allows it."""
        source = self.source
        assert source is not None
        replicas = self.backbone.replicas
        if replicas:
            records = []
            for entry, publisher, runs in replicas:
                first = int.from_bytes(entry.view[3:codec.FRAME_HEADER], "big")
                encoded = frames.records_for(self.epoch, entry, first, publisher, runs)
                source.keep(first, first + entry.count - 1, encoded)
                records += encoded
            replicas.clear()
            self._send(records)
            self.counters["pair records"] += len(records)
        self.receive(now)  # a newer epoch waiting (this process was frozen, say): it must not send this
        if self.role != PRIMARY:
            self.counters["pair held output dropped"] += len(out.sends)
            return
        last = self.backbone.sequence.last_issued
        if self._held or not source.releasable(last):
            self._held.append((last, out.sends))
            if source.want(last, now) > self._wanted:
                self._heartbeat(now)
            self._release(now)
        else:
            send_all(self.client_sock, out.sends, self.counters)
            self._delivered = last

    def _release(self, now: float) -> None:
        source = self.source
        held = self._held
        while held and source is not None and source.releasable(held[0][0]):
            through, sends = held.popleft()
            send_all(self.client_sock, sends, self.counters)
            self._delivered = through

    def tick(self, now: float) -> None:
        """Timers: heartbeats, detaching a silent standby, REPLAY requests, the role file."""
        if self.role == PRIMARY:
            source = self.source
            assert source is not None
            if source.tick(now):
                self.counters["pair standby detached"] += 1
                self._release(now)
            if now >= self._next_state:
                self._heartbeat(now)
        else:
            follower = self.follower
            replays = follower.replays(now)
            if replays:
                self._send(replays)
            granted = follower.granted
            follower.persisted_up_to(self.reservations.durable)
            if now >= self._next_state or follower.granted > granted:  # a grant persisted: tell the primary now
                self._next_state = now + STATE_EVERY
                self._send([follower.ack()])
            if self._role_now() != self._written_role:
                self._write_role()

    def _heartbeat(self, now: float) -> None:
        source = self.source
        assert source is not None
        backbone = self.backbone
        last = backbone.sequence.last_issued
        want = source.want(last, now)
        self._wanted = max(self._wanted, want)
        members: list[frames.Member] = []
        if now >= self._next_members:
            self._next_members = now + MEMBERS_EVERY
            members = [frames.Member(addr, flags, int(age * 1000)) for addr, flags, age in backbone.clients.members(now)]
        self._send(frames.encode_state(self.epoch, frames.ROLE_PRIMARY, source.flags(), last, self._delivered, want,
                                       source.clean_ms(now), members))
        self._next_state = now + STATE_EVERY

    def next_due(self) -> float:
        """When the next heartbeat (STATE or ACK) is due; the loop wakes for it."""
        return self._next_state

    # ------------------------------------------------------------ roles

    def apply_requested(self, now: float) -> None:
        """Apply a role asked for by signal (a standby asked to stand by, or a primary to lead, stays as it is)."""
        wanted, self.requested = self.requested, None
        if wanted == PRIMARY and self.role != PRIMARY:
            self._promote(now)
        elif wanted == STANDBY and self.role == PRIMARY:
            self._demote()

    def _promote(self, now: float) -> None:
        backbone = self.backbone
        self.follower.persisted_up_to(self.reservations.durable)
        plan = self.follower.takeover(now)
        self.epoch = max(self.epoch + 1, plan.epoch)  # above its own earlier epochs too
        self._write(os.path.join(self.directory, "epoch"), f"{self.epoch}\n")
        backbone.sequence = SequenceCounter(plan.start - 1, backbone.sequence.block)
        self._delivered = plan.start - 1
        if plan.resend is not None:
            backbone.send_to_subscribers([bytes(frame) for _, frame in backbone.recent.frames(*plan.resend)], now)
        if plan.unknown is not None:
            if plan.never_sent:
                backbone.declare_gone(*plan.unknown, codec.GONE_NEVER_SENT, now)
            else:
                backbone.recover(*plan.unknown, self.service, now)
        self.source = ReplicationSource(self.epoch, sync=self.sync, timeout=self.timeout)
        backbone.replicas = []
        self.role = PRIMARY
        self.counters["pair takeovers"] += 1
        self._write_role()
        self._heartbeat(now)

    def _demote(self) -> None:
        self.counters["pair held output dropped"] += sum(len(sends) for _, sends in self._held)
        self._held.clear()  # not CONFIRMed: publishers send again, to the new primary
        self.source = None
        self.backbone.replicas = None
        self.follower = ReplicaFollower(self.epoch, self.reservations.durable,
                                        issued=self.backbone.sequence.last_issued, delivered=self._delivered)
        self._wanted = 0
        self.role = STANDBY
        self._write_role()

    def _fence(self, epoch: int) -> None:
        self.counters["pair fenced"] += 1
        self._fenced_by = epoch
        self._demote()
        self.follower.newer(epoch)

    # ------------------------------------------------------------ metrics

    def metrics(self, now: float) -> dict[str, float]:
        values: dict[str, float] = {"role_primary": float(self.role == PRIMARY), "epoch": float(self.epoch)}
        if self.source is not None:
            source = self.source
            values["standby_attached"] = float(source.attached)
            values["replication_lag_messages"] = float(source.lag(self.backbone.sequence.last_issued))
            values["replication_lag_seconds"] = max(0.0, now - source.last_ack) if source.attached else -1.0
        else:
            follower = self.follower
            behind = follower.primary.last_issued - follower.held if follower.primary is not None else 0
            values["replication_lag_messages"] = float(max(0, behind))
            values["replication_lag_seconds"] = max(0.0, now - follower.heard) if follower.primary else -1.0
        return values

    def close(self) -> None:
        self.sock.close()
        try:
            os.unlink(os.path.join(self.directory, "pid"))
        except FileNotFoundError:
            pass
