"""The sockets, files and signals of one pair member, for the single-process backbone's loop (``--pair``/``--peer``).

Every rule of the pair (roles, epochs, fencing, held output, grants) is the
pure :class:`~fyrehose.backbone.pair.member.PairMember`'s; this driver reads
the pair socket, keeps the state directory's ``pid``, ``role`` and ``epoch``
files, and carries out the member's :class:`~fyrehose.backbone.pair.member.Actions`.
A standby does not read the client socket at all (datagrams that reach it
wait in the kernel for its promotion).  keepalived changes the role by signal
(SIGUSR1 promote, SIGUSR2 demote) and reads it back from ``STATE_DIR/role``
(docs/operations.md, "A hot standby pair").
"""
from __future__ import annotations

import os
import select
import socket

from fyrehose.backbone.core import Backbone, Flush
from fyrehose.backbone.host.statefile import ReservationWriter, StateError
from fyrehose.backbone.host.udp import bind_udp, send_all
from fyrehose.backbone.pair import frames
from fyrehose.backbone.pair.member import Actions, PairMember, Role
from fyrehose.protocol.codec import Address
from fyrehose.runtime.durable import replace_atomically

RECV_SIZE = 65536
RECV_BATCH = 4096  # pair datagrams taken per call


class PairDriver:
    def __init__(self, backbone: Backbone, reservations: ReservationWriter, directory: os.PathLike | str,
                 client_sock: socket.socket, pair: Address, peer: Address, *, sync: bool, timeout: float,
                 key: bytes | None = None) -> None:
        self.backbone = backbone
        self.client_sock = client_sock
        self.reservations = reservations
        self.directory = os.fspath(directory)
        self.peer = peer
        self.counters = backbone.counters
        self.sock = bind_udp(pair)
        self._readable = select.poll()  # whether the pair socket holds a datagram, without a failing read
        self._readable.register(self.sock, select.POLLIN)
        self.requested: Role | None = None  # a role asked for by signal, applied by the loop
        self._write("pid", f"{os.getpid()}\n")
        self.member = PairMember(backbone, self.sock.getsockname(), peer, client_sock.getsockname(),
                                 epoch=self._read_epoch(), durable=reservations.durable, sync=sync, timeout=timeout,
                                 key=key)
        self._write("role", self.member.role.value + "\n")

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

    def _write(self, name: str, text: str) -> None:
        replace_atomically(os.path.join(self.directory, name), text.encode())  # type: ignore[arg-type]

    def _carry_out(self, actions: Actions) -> None:
        if actions.grant is not None:
            self.reservations.submit(actions.grant)
        if actions.epoch is not None:
            self._write("epoch", f"{actions.epoch}\n")
        if actions.to_peer:
            send_all(self.sock, [(datagram, self.peer) for datagram in actions.to_peer], self.counters)
        if actions.to_clients:
            send_all(self.client_sock, actions.to_clients, self.counters)
        if actions.role is not None:
            self._write("role", actions.role.value + "\n")

    # ------------------------------------------------------------ the loop's calls

    @property
    def primary(self) -> bool:
        return self.member.primary

    def receive(self, now: float) -> None:
        """Everything the pair socket holds (an empty socket, the usual case in a flush, is seen by a poll: a
        read that fails costs 2.4 us against its 0.7)."""
        if not self._readable.poll(0):
            return
        datagrams = []
        for _ in range(RECV_BATCH):
            try:
                datagrams.append(self.sock.recvfrom(RECV_SIZE))
            except BlockingIOError:
                break
            except OSError:
                self.counters["drop:pair receive error"] += 1
        self._carry_out(self.member.receive(datagrams, now, self.reservations.durable))

    def replicate_and_send(self, out: Flush, now: float) -> None:
        """The primary's flush: RECORDs to the standby first, then the output, once the standby allows it."""
        self._carry_out(self.member.replicate())
        self.receive(now)  # a newer epoch waiting (this process was frozen, say): it must not send this
        self._carry_out(self.member.gate(out.sends, now))

    def handle_timers(self, now: float) -> None:
        self._carry_out(self.member.handle_timers(now, self.reservations.durable))

    def next_deadline(self) -> float:
        return self.member.next_deadline()

    def apply_requested(self, now: float) -> None:
        """Apply a role asked for by signal (a standby asked to stand by, or a primary to lead, stays as it is)."""
        wanted, self.requested = self.requested, None
        if wanted == Role.PRIMARY:
            self._carry_out(self.member.promote(now, self.reservations.durable))
        elif wanted == Role.STANDBY:
            self._carry_out(self.member.demote(now))

    def metrics(self, now: float) -> dict[str, float]:
        return self.member.metrics(now)

    def close(self) -> None:
        self.sock.close()
        try:
            os.unlink(os.path.join(self.directory, "pid"))
        except FileNotFoundError:
            pass
