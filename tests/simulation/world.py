"""The whole deployment in one thread on a virtual clock: two backbone hosts, keepalived on each, the clients.

Nothing here opens a socket, starts a thread or reads a clock: every
datagram is an event on one heap, every link has rules (cut, loss,
duplication, delay and jitter, which reorders), and every random choice comes
from one seeded generator, so a seed replays exactly.  The parts are the
project's own pure state machines: :class:`~fyrehose.backbone.core.Backbone`
and :class:`~fyrehose.backbone.pair.member.PairMember` on each host, driven as
``backbone/single/driver.py`` and ``pair_member.py`` drive them, and
:class:`~fyrehose.protocol.connection.BackboneConnection` for every client.
keepalived is modelled as the kit configures it (``tools/deploy/keepalived.py``:
``state BACKUP``, ``nopreempt``, unicast adverts every 0.1 s on the hosts' link,
a check that looks at the role file and the process every 0.1 s and fails a
look that finds another process than the last one, fall 1, rise 2, SIGUSR1 on
MASTER, SIGUSR2 on BACKUP and FAULT).
"""
from __future__ import annotations

import heapq
import random
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field

from fyrehose.backbone.core import Backbone
from fyrehose.backbone.pair.member import Actions, PairMember, Role
from fyrehose.protocol import codec
from fyrehose.protocol.codec import Address
from fyrehose.protocol.connection import BackboneConnection, ConnectionOptions
from fyrehose.protocol.publishing import PendingPublishes
from fyrehose.protocol.tracker import Lost, Message, TrackerOptions

VIP: Address = ("10.0.0.100", 2323)
PAIR_ADDRESSES = {"a": ("10.0.0.1", 2324), "b": ("10.0.0.2", 2324)}
CLIENTS = "c"  # the clients' site: every client sits behind one link to each host
HOSTS = ("a", "b")
ADVERT_EVERY = 0.1
CHECK_EVERY = 0.1
RISE_AFTER = 2.0  # keepalived's rise 2 at one run a second: two good seconds before the instance leaves FAULT
RESERVE_BLOCK = 4096  # the cores' reservation block: small, so that reservations are renewed during a run
STANDBY_TIMEOUT = 1.0
EPSILON = 1e-9
LOOP_EVERY = 0.005  # a host's loop wakes at least this often while it has work pending


@dataclass
class LinkRule:
    """One direction of one link."""

    cut: bool = False
    loss: float = 0.0
    duplicate: float = 0.0
    delay: float = 0.0002
    jitter: float = 0.0  # extra random delay up to this: datagrams overtake each other


@dataclass
class Disk:
    """A backbone's state directory: the reservation mark, the epoch and the role files."""

    durable: int = 0
    epoch: int = 0
    role: Role = Role.STANDBY


class World:
    def __init__(self, seed: int, *, sync: bool) -> None:
        self.rng = random.Random(seed)
        self.sync = sync
        self.now = 0.0
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._order = 0
        self.links: dict[tuple[str, str], LinkRule] = {
            (x, y): LinkRule() for x in ("a", "b", "c") for y in ("a", "b", "c") if x != y}
        self.vip_holder: str | None = None
        self.hosts = {name: Host(self, name) for name in HOSTS}
        self.clients: dict[Address, SimClient] = {}
        self.history = History()
        self.faults_injected: Counter[str] = Counter()  # by kind

    # ------------------------------------------------------------ events

    def at(self, when: float, action: Callable[[], None]) -> None:
        self._order += 1
        heapq.heappush(self._heap, (when if when > self.now else self.now, self._order, action))

    def run_until(self, end: float) -> None:
        heap = self._heap
        while heap and heap[0][0] <= end:
            when, _, action = heapq.heappop(heap)
            self.now = when
            action()
        self.now = end

    # ------------------------------------------------------------ the network

    def send(self, site: str, destination_site: str, deliver: Callable[[], None]) -> None:
        rule = self.links[(site, destination_site)]
        if rule.cut:
            return
        rng = self.rng
        if rule.loss and rng.random() < rule.loss:
            return
        copies = 2 if rule.duplicate and rng.random() < rule.duplicate else 1
        for _ in range(copies):
            self.at(self.now + rule.delay + (rng.random() * rule.jitter if rule.jitter else 0.0), deliver)

    def to_service(self, datagram: bytes, source: Address) -> None:
        """A client's datagram to the VIP: it goes to the host that took the address last (its gratuitous ARP)."""
        holder = self.vip_holder
        if holder is None:
            return
        host = self.hosts[holder]
        self.send(CLIENTS, holder, lambda: host.client_datagram(datagram, source))

    def to_client(self, site: str, datagram: bytes, destination: Address) -> None:
        client = self.clients.get(destination)
        if client is not None:
            self.send(site, CLIENTS, lambda: client.receive(datagram, VIP))

    def between_clients(self, datagram: bytes, source: Address, destination: Address) -> None:
        """A journaling client's re-DELIVER: to another client, or to the VIP (a takeover's recovery)."""
        if destination == VIP:
            self.to_service(datagram, source)
        elif destination in self.clients:
            client = self.clients[destination]
            self.at(self.now + 0.0002, lambda: client.receive(datagram, source))


class Host:
    """One backbone host: the process (core and pair member), its state directory, and keepalived."""

    def __init__(self, world: World, name: str) -> None:
        self.world = world
        self.name = name
        self.peer = "b" if name == "a" else "a"
        self.disk = Disk()
        self.clock_offset = 0.0  # the host's monotonic clock minus the world's (clock jumps move it forward)
        self.paused_until: float | None = None  # the whole host frozen (a VM pause)
        self.stopped = False  # only the backbone stopped (SIGSTOP)
        self.process: Process | None = None
        self.incarnation = 0
        self.keepalived = Keepalived(self)
        self.start_process()

    @property
    def frozen(self) -> bool:
        return self.paused_until is not None

    def start_process(self) -> None:
        self.incarnation += 1
        self.process = Process(self, self.incarnation)

    def kill(self) -> None:
        if self.process is not None:
            self.world.history.killed.add((self.name, self.process.incarnation))
        self.process = None
        self.stopped = False

    @property
    def follows_the_stream(self) -> bool:
        """Its backbone runs and is primary, or follows one: it knows every number issued (so the peer's state
        directory may be lost: a restarted peer learns from it)."""
        process = self.process
        return process is not None and not self.frozen and not self.stopped and (
            process.member.primary or process.member.follower.primary is not None)

    def knows_epoch(self, epoch: int) -> bool:
        """Whether its backbone has heard of ``epoch`` (led it, followed it, or a newer one)."""
        return self.process is not None and self.process.member.epoch >= epoch

    def client_datagram(self, datagram: bytes, source: Address) -> None:
        if self.process is not None:
            self.process.client_queue.append((datagram, source))
            self.process.wake()

    def pair_datagram(self, datagram: bytes, source: Address) -> None:
        if self.process is not None:
            self.process.pair_queue.append((datagram, source))
            self.process.wake()

    def signal(self, role: Role) -> None:
        """keepalived's notify scripts (or an operator): SIGUSR1 or SIGUSR2 to the backbone, if there is one."""
        if self.process is not None:
            self.process.requested = role
            self.process.wake()

    def pause(self, seconds: float) -> None:
        until = self.world.now + seconds
        self.paused_until = max(until, self.paused_until or until)
        self.world.at(self.paused_until, self.resume)

    def resume(self) -> None:
        """The end of a pause: the host runs again (a longer pause since then is still in force)."""
        if self.paused_until is not None and self.world.now >= self.paused_until:
            self.paused_until = None
            self.keepalived.resume()
            if self.process is not None:
                self.process.wake()

    def resume_backbone(self) -> None:
        self.stopped = False
        if self.process is not None:
            self.process.wake()


class Process:
    """One run of ``fyrehose backbone --pair``: the core and the pair member, driven as the single driver does."""

    def __init__(self, host: Host, incarnation: int) -> None:
        self.host = host
        self.world = host.world
        self.incarnation = incarnation
        disk = host.disk
        self.core = Backbone(reserved=disk.durable, reserve_block=RESERVE_BLOCK,
                             rng=random.Random(self.world.rng.getrandbits(32)))
        self.member = PairMember(self.core, PAIR_ADDRESSES[host.name], PAIR_ADDRESSES[host.peer], VIP,
                                 epoch=disk.epoch, durable=disk.durable, sync=self.world.sync, timeout=STANDBY_TIMEOUT)
        disk.role = self.member.role
        self.client_queue: deque[tuple[bytes, Address]] = deque()
        self.pair_queue: deque[tuple[bytes, Address]] = deque()
        self.requested: Role | None = None
        self._wake_at: float | None = None
        self._events: set[float] = set()  # the times of its wake-up events on the heap (one event a time)
        self.wake()

    def wake(self, when: float | None = None) -> None:
        world = self.world
        when = world.now if when is None else when
        if self._wake_at is not None and self._wake_at <= when:
            return
        self._wake_at = when
        if when not in self._events:
            self._events.add(when)
            world.at(when, self._run)

    def _run(self) -> None:
        host, world = self.host, self.world
        self._events.discard(world.now)
        if host.process is not self or self._wake_at is None or world.now < self._wake_at:
            return
        self._wake_at = None
        if host.frozen or host.stopped:
            return  # it runs again when it resumes
        now = world.now + host.clock_offset
        member = self.member
        self._receive_pair(now)  # what the peer said meanwhile first: a signal is applied knowing it
        if self.requested is not None:
            wanted, self.requested = self.requested, None
            self._carry(member.promote(now, host.disk.durable) if wanted == Role.PRIMARY else member.demote(now))
        if member.primary:
            core = self.core
            queue = self.client_queue
            while queue:
                data, source = queue.popleft()
                core.receive(data, source, now)
            if core.pending():
                out = core.flush(now)
                if out.reserve is not None:
                    host.disk.durable = max(host.disk.durable, out.reserve)
                if core.sequence.last_issued > host.disk.durable:  # the driver refuses to send it, and stops
                    world.history.uncovered.append((world.now, host.name, core.sequence.last_issued,
                                                    host.disk.durable))
                    host.disk.durable = core.sequence.last_issued  # (told once: the run goes on as if written)
                self._carry(member.replicate())
                self._receive_pair(now)  # a newer epoch waiting: it must not send this
                self._carry(member.gate(out.sends, now))
                core.keep_recent()
        self._carry(member.handle_timers(now, host.disk.durable))
        due = member.next_deadline()
        core_due = self.core.next_deadline(now) if member.primary else None
        if core_due is not None:
            due = min(due, core_due)
        if member.holding:
            due = min(due, now + LOOP_EVERY)
        self.wake(max(world.now, due - host.clock_offset) + EPSILON)  # (the offset's rounding: never again now)

    def _receive_pair(self, now: float) -> None:
        """What the pair socket holds (nothing to read: nothing to do, as the driver's read that finds none)."""
        queue = self.pair_queue
        if not queue:
            return
        datagrams = list(queue)
        queue.clear()
        self._carry(self.member.receive(datagrams, now, self.host.disk.durable))

    def _carry(self, actions: Actions) -> None:
        if not actions.to_peer and not actions.to_clients and actions.grant is None and actions.epoch is None \
                and actions.role is None:
            return
        host, world = self.host, self.world
        if actions.grant is not None:
            host.disk.durable = max(host.disk.durable, actions.grant)
        if actions.epoch is not None:
            host.disk.epoch = actions.epoch
        peer = world.hosts[host.peer]
        source = PAIR_ADDRESSES[host.name]
        for datagram in actions.to_peer:
            world.send(host.name, host.peer, lambda d=datagram: peer.pair_datagram(d, source))
        acting = False
        alone = peer.process is None  # the other host's backbone is dead: what this one CONFIRMs is on one host
        for datagram, destination in actions.to_clients:
            data = bytes(datagram)
            acting = acting or data[0] in (codec.DELIVER, codec.CONFIRM)
            if alone and data[0] == codec.CONFIRM:
                for _, seq in codec.decode_confirms(data):
                    world.history.confirmed_alone[seq] = (host.name, self.incarnation)
            world.to_client(host.name, data, destination)
        if acting:
            world.history.acting(self.member.epoch, (host.name, self.incarnation), world.now)
        if actions.role is not None:
            host.disk.role = actions.role


class Keepalived:
    """One host's VRRP instance as the kit configures it (``state BACKUP``, ``nopreempt``, unicast adverts)."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self.world = host.world
        self.priority = 150 if host.name == "a" else 100
        self.state = "BACKUP"
        self.running = True
        self.healthy_since: float | None = 0.0
        self.seen: int | None = None  # the check's record outside the state directory: the process it saw last
        self._down = 0  # the generation of the master-down timer: an advert re-arms it
        self._timers = 0  # the generation of the check and advert timers: a pause stops them, resume() restarts
        self.resume()

    def _arm_master_down(self) -> None:
        """No advert for three intervals and the skew (shorter for a higher priority): this host takes over."""
        self._down += 1
        generation = self._down
        skew = (256 - self.priority) / 256 * ADVERT_EVERY
        self.world.at(self.world.now + 3 * ADVERT_EVERY + skew, lambda: self._master_down(generation))

    def _master_down(self, generation: int) -> None:
        if generation == self._down and self.state == "BACKUP" and not self.host.frozen:
            self._become("MASTER")

    def resume(self) -> None:
        """(Re)start the timers: at once after a pause (those that expired meanwhile fire now)."""
        self._timers += 1
        generation = self._timers
        if self.state == "BACKUP":
            self._arm_master_down()
        self.world.at(self.world.now + CHECK_EVERY, lambda: self._check(generation))
        self.world.at(self.world.now + ADVERT_EVERY, lambda: self._advert(generation))

    def _healthy(self) -> bool:
        host = self.host
        process = host.process
        if process is None:
            return False
        if process.incarnation != self.seen:  # another backbone process than the last look saw: one bad look
            restarted, self.seen = self.seen is not None, process.incarnation
            if restarted:
                return False
        return not host.stopped and host.disk.role in (Role.PRIMARY, Role.STANDBY)

    def _check(self, generation: int) -> None:
        world = self.world
        if self.host.frozen or generation != self._timers:
            return  # resume() restarts it
        world.at(world.now + CHECK_EVERY, lambda: self._check(generation))
        if not self._healthy():
            self.healthy_since = None
            if self.state != "FAULT":
                self._become("FAULT")
            return
        if self.healthy_since is None:
            self.healthy_since = world.now
        if self.state == "FAULT" and world.now - self.healthy_since >= RISE_AFTER:
            self._become("BACKUP")
            self._arm_master_down()

    def _advert(self, generation: int) -> None:
        world = self.world
        if self.host.frozen or generation != self._timers:
            return
        world.at(world.now + ADVERT_EVERY, lambda: self._advert(generation))
        if self.state == "MASTER":
            self._send_advert()

    def _send_advert(self) -> None:
        world = self.world
        peer = world.hosts[self.host.peer].keepalived
        priority = self.priority
        world.send(self.host.name, self.host.peer, lambda: peer.advert(priority))

    def advert(self, priority: int) -> None:
        if self.host.frozen:
            return
        if self.state == "BACKUP":
            self._arm_master_down()
        elif self.state == "MASTER" and priority > self.priority:
            self._become("BACKUP")
            self._arm_master_down()  # a master that hears a higher priority master yields

    def _become(self, state: str) -> None:
        world, host = self.world, self.host
        self.state = state
        world.history.transition(host.name, state, world.now)
        if state == "MASTER":
            world.vip_holder = host.name
            self._send_advert()
            host.signal(Role.PRIMARY)
        else:
            if world.vip_holder == host.name:
                world.vip_holder = None
                other = world.hosts[host.peer].keepalived
                if other.state == "MASTER":
                    world.vip_holder = host.peer  # it still holds the address: its next advert's ARP wins
            host.signal(Role.STANDBY)


# ---------------------------------------------------------------- clients


@dataclass
class History:
    """What the clients were told, and who acted as primary: the checker reads only this."""

    confirmed: dict[bytes, int] = field(default_factory=dict)  # payload -> the number its CONFIRM gave
    unconfirmed: set[bytes] = field(default_factory=set)  # published, no CONFIRM before the deadline
    received: dict[str, list[tuple[float, Message | Lost]]] = field(default_factory=dict)  # subscriber -> events
    acting_epochs: dict[int, set[tuple[str, int]]] = field(default_factory=dict)  # epoch -> (host, incarnation)
    transitions: list[tuple[float, str, str]] = field(default_factory=list)
    confirm_times: dict[bytes, float] = field(default_factory=dict)
    # a number issued beyond what the state file covers: (when, host, number, covered); the real driver stops there
    uncovered: list[tuple[float, str, int, int]] = field(default_factory=list)
    # number -> the backbone process (host, incarnation) that CONFIRMed it while the other host's backbone was dead
    confirmed_alone: dict[int, tuple[str, int]] = field(default_factory=dict)
    killed: set[tuple[str, int]] = field(default_factory=set)  # backbone processes killed (kill -9)

    def acting(self, epoch: int, process: tuple[str, int], now: float) -> None:
        self.acting_epochs.setdefault(epoch, set()).add(process)

    def transition(self, host: str, state: str, now: float) -> None:
        self.transitions.append((now, host, state))


class SimClient:
    """One client process: a :class:`BackboneConnection` to the VIP, publishing and/or subscribing."""

    def __init__(self, world: World, name: str, port: int, *, subscribe: bool, journal: bool) -> None:
        self.world = world
        self.name = name
        self.address: Address = ("10.0.1.1", port)
        flags = codec.FLAG_HEAD | codec.FLAG_BATCH
        flags |= 0 if subscribe else codec.FLAG_NOSUBSCRIBE
        flags |= 0 if journal else codec.FLAG_NOJOURNAL
        tokens = iter(range(port << 20, (port + 1) << 20))
        self.connection = BackboneConnection(VIP, ConnectionOptions(flags=flags, tracker=TrackerOptions()),
                                             token_source=lambda size: next(tokens).to_bytes(size, "big"))
        self.connection.publishes = PendingPublishes(first_tag=port << 24, stats=self.connection.stats)
        self.subscribes = subscribe
        self.store: dict[int, bytes] = {}
        self.journal = journal
        if subscribe:
            self.connection.track(None)
            world.history.received[name] = []
        self._batches: dict[int, bytes] = {}
        self._wake_at: float | None = None
        world.clients[self.address] = self
        self.wake(world.now)

    def publish(self, payload: bytes, timeout: float) -> None:
        number, datagrams = self.connection.publishes.start([payload], self.world.now, timeout)
        self._batches[number] = payload
        for datagram in datagrams:
            self.world.to_service(datagram, self.address)
        self.wake(self.world.now)

    def wake(self, when: float) -> None:
        if self._wake_at is not None and self._wake_at <= when:
            return
        self._wake_at = when
        self.world.at(when, self._run)

    def _run(self) -> None:
        world = self.world
        if self._wake_at is None or world.now < self._wake_at:
            return
        self._wake_at = None
        now = world.now
        connection = self.connection
        datagrams, events = connection.handle_timers(now)
        resends, finished = connection.publishes.handle_timers(now)
        for datagram in datagrams + resends:
            world.to_service(datagram, self.address)
        self._events(events)
        self._finished(finished)
        self.wake(connection.next_deadline())

    def receive(self, datagram: bytes, source: Address) -> None:
        world = self.world
        incoming = self.connection.receive(datagram, source, world.now)
        if self.journal:
            self.store.update(incoming.stored)
        self._events(incoming.events)
        self._finished(incoming.published)
        for forward in incoming.forwards:
            target = (forward.addr, forward.port)
            for seq in range(forward.from_seq, forward.to_seq + 1):
                if seq in self.store:
                    world.between_clients(codec.encode_deliver(seq, self.store[seq]), self.address, target)
            self.connection.forward_done(forward)
        self.wake(world.now)

    def _events(self, events: list) -> None:
        if events and self.subscribes:
            received = self.world.history.received[self.name]
            received.extend((self.world.now, event) for event in events)

    def _finished(self, finished: list) -> None:
        history = self.world.history
        for done in finished:
            payload = self._batches.pop(done.batch, None)
            if payload is None:
                continue
            if done.seqs is not None:
                history.confirmed[payload] = done.seqs[0]
                history.confirm_times[payload] = self.world.now
            else:
                history.unconfirmed.add(payload)
