"""The multi-process backbone (``--workers R``): sets everything up, forks the workers, keeps them alive.

Before forking, the supervisor binds R sockets to the listen address in one
SO_REUSEPORT group (one per receive worker; the sequencer and the fan-out
workers send through the first of them, so every datagram leaves from the
backbone's port and no send-only socket joins the group to steal packets),
and maps the shared memory (see :mod:`fyrehose.backbone.multiprocess.shared`).  Workers are
plain forks that inherit all of it.

A worker that dies is forked again and counted
(``fyrehose_worker_restarts_total``); a worker that outlives the supervisor is
killed by the kernel (PR_SET_PDEATHSIG).  SIGTERM or SIGINT drain the pipeline
in order (receivers stop reading, the sequencer empties its rings, the fan-out
workers send the rest of the log), store the exact last sequence and exit.
"""
from __future__ import annotations

import ctypes
import mmap
import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import psutil

from fyrehose.backbone.cookies import CookieJar
from fyrehose.backbone.host.multicast import GroupOptions, enable_group_sends
from fyrehose.backbone.host.statefile import SequenceStateFile
from fyrehose.backbone.host.stopping import StopRequest
from fyrehose.backbone.host.udp import SOCKET_BUFFER, bind_udp
from fyrehose.backbone.intake import AddressPolicy
from fyrehose.backbone.multiprocess.confirm_table import SharedConfirmTable
from fyrehose.backbone.multiprocess.fanout import FanOut
from fyrehose.backbone.multiprocess.receiver import enable_arrival_times, run_receiver
from fyrehose.backbone.multiprocess.rings import Doorbell, Ring
from fyrehose.backbone.multiprocess.sequencer import Sequencer, restored_backbone
from fyrehose.backbone.multiprocess.shared import CounterBlock, SequencerState, SubscriberTable, Words, anonymous
from fyrehose.backbone.ratelimit import SourceRateLimiter
from fyrehose.backbone.recent_log import DEFAULT_BYTES as RECENT_BYTES
from fyrehose.protocol.codec import Address
from fyrehose.runtime.metrics import (
    Metric,
    MetricsServer,
    client_metrics,
    counter_metrics,
    process_metrics,
    restart_metrics,
    ring_metrics,
)
from fyrehose.runtime.readiness import announce_ready

# Deep enough to ride out a worker that waits ~0.5 s for a CPU at 600,000 msgs/s (a full input ring
# drops); smaller rings stay in the last-level cache but lose messages on a busy host.
INPUT_RING_BYTES = 32 << 20
LOG_RING_BYTES = 32 << 20
STAGE_TIMEOUT = 0.5  # seconds each stage of a shutdown may take before its workers are killed
RESTART_SPACING = 0.2  # a worker that keeps dying is forked at most this often

_PR_SET_PDEATHSIG = 1
_PR_SET_NAME = 15
_libc = ctypes.CDLL(None, use_errno=True)


@dataclass
class Options:
    listen: Address
    workers: int
    fanout: int
    trusted_networks: tuple = ()
    batch_bytes: int = 65507
    max_clients: int = 65536
    metrics: Address | None = None
    rate_limit: float = 0  # datagrams/s per source IP, enforced by each receive worker; 0: off
    socket_buffer: int = SOCKET_BUFFER  # SO_RCVBUF and SO_SNDBUF asked for each socket
    recent_bytes: int = RECENT_BYTES  # the sequencer's log of recent messages, for last-resort re-delivery
    multicast: GroupOptions | None = None  # fan-out worker 0 also sends every DELIVER datagram to this group
    cookie_key: bytes | None = None  # --validate-addresses: the key of the cookies (the same in every worker)

    def cookies(self) -> CookieJar | None:
        """A worker's own jar (each rations its COOKIE answers itself), or None without address validation."""
        return CookieJar(self.cookie_key) if self.cookie_key is not None else None


@dataclass
class Worker:
    """One slot of the process tree: its role, the function it runs, and its current process."""

    name: str
    stage: int  # shutdown order: 0 receivers, 1 sequencer, 2 fan-outs
    block: int  # index of its stop flag and counter block
    target: Callable[[], None]
    process: multiprocessing.process.BaseProcess | None = None
    restarts: int = 0
    started: float = 0.0
    handle: psutil.Process | None = field(default=None, repr=False)  # for its CPU and memory metrics


class Supervisor:
    def __init__(self, options: Options, state_file: SequenceStateFile, reserved: int) -> None:
        self.options = options
        self.state_file = state_file
        self._context = multiprocessing.get_context("fork")
        self._pid = os.getpid()
        self._stop = StopRequest()
        r, f = options.workers, options.fanout
        roles = r + 1 + f

        self.sockets = [bind_udp(options.listen, reuse_port=True, buffer_size=options.socket_buffer)]
        self.address = self.sockets[0].getsockname()
        self.sockets += [bind_udp(self.address, reuse_port=True, buffer_size=options.socket_buffer)
                         for _ in range(r - 1)]
        if r > 1:
            for sock in self.sockets:
                enable_arrival_times(sock)
        if options.multicast is not None:
            enable_group_sends(self.sockets[0], options.multicast)  # the socket every fan-out worker sends from

        self._memory: list[mmap.mmap] = []  # keeps every mapping alive in the supervisor
        self.counter_blocks = [CounterBlock(self._map(CounterBlock.SIZE)) for _ in range(roles)]
        self.sequencer_state = SequencerState(self._map(SequencerState.SIZE))
        self.sequencer_state.last_issued = reserved
        self.table = SubscriberTable(self._map(SubscriberTable.region_size(options.max_clients)), options.max_clients)
        self._confirm_region = self._map(SharedConfirmTable.region_size())
        self.stop_flags = Words(self._map(8 * roles), roles)
        self.busy_flags = Words(self._map(8 * r), r) if r > 1 else None
        self.watermarks = Words(self._map(8 * r), r) if r > 1 else None
        # Each process builds its own Ring over these (a Ring caches its cursors; a fresh one reads them).
        self._input_regions = [self._map(Ring.region_size(INPUT_RING_BYTES)) for _ in range(r)]
        self._log_region = self._map(Ring.region_size(LOG_RING_BYTES, f))
        self.input_rings = [Ring(region) for region in self._input_regions]
        self.log = Ring(self._log_region, f)
        self.sequencer_bell = Doorbell()
        self.receiver_bells = [Doorbell() for _ in range(r)]
        self.fanout_bells = [Doorbell() for _ in range(f)]

        self.workers: list[Worker] = []
        for i in range(r):
            self.workers.append(Worker(f"receiver-{i}", 0, i, self._receiver(i)))
        self.workers.append(Worker("sequencer", 1, r, self._sequencer(r)))
        for i in range(f):
            self.workers.append(Worker(f"fanout-{i}", 2, r + 1 + i, self._fanout(i, r + 1 + i)))

        self._metrics = MetricsServer(options.metrics, self._collect) if options.metrics else None
        self._process = psutil.Process()

    def _map(self, size: int) -> memoryview:
        region = anonymous(size)
        self._memory.append(region)
        return memoryview(region)

    # ------------------------------------------------------------ worker bodies (run in the child)

    def _stopper(self, block: int) -> Callable[[], bool]:
        """In a worker: true once the supervisor raised its stop flag or the worker got SIGTERM."""
        flags = self.stop_flags
        stop = self._stop
        return lambda: stop.requested or flags[block] != 0

    def _receiver(self, i: int) -> Callable[[], None]:
        def body() -> None:
            run_receiver(self.sockets[i], Ring(self._input_regions[i]), self.sequencer_bell, self.receiver_bells[i],
                         self.counter_blocks[i], self._stopper(i),
                         AddressPolicy(self.options.trusted_networks, self.options.cookies()),
                         self.busy_flags, self.watermarks, i,
                         limiter=SourceRateLimiter(self.options.rate_limit) if self.options.rate_limit else None)
        return body

    def _sequencer(self, block: int) -> Callable[[], None]:
        def body() -> None:
            options = self.options
            stopping = self._stopper(block)
            backbone = restored_backbone(
                self.sequencer_state, self.table, self.counter_blocks[block], time.monotonic(),
                SharedConfirmTable(self._confirm_region, time.monotonic(), published=self.sequencer_state.last_issued),
                trusted_networks=options.trusted_networks, batch_bytes=options.batch_bytes,
                recent_bytes=options.recent_bytes,
                client_capacity=options.max_clients,
                multicast=options.multicast.group if options.multicast is not None else None,
                cookies=options.cookies(),
            )
            Sequencer(backbone, [Ring(region) for region in self._input_regions],
                      Ring(self._log_region, options.fanout), self.sequencer_bell, self.fanout_bells,
                      self.sockets[0], self.sequencer_state, self.table, self.counter_blocks[block],
                      self.state_file, stopping, self.sockets, self.busy_flags, self.watermarks).run()
        return body

    def _fanout(self, i: int, block: int) -> Callable[[], None]:
        def body() -> None:
            workers = self.options.fanout
            FanOut(i, workers, Ring(self._log_region, workers), self.fanout_bells[i], self.table, self.sockets[0],
                   self.counter_blocks[block], self.options.batch_bytes, self._stopper(block),
                   self.options.multicast.group if self.options.multicast is not None else None).run()
        return body

    def _child_main(self, worker: Worker) -> None:
        """First thing in a forked worker: die with the supervisor, take a name, shed the supervisor's duties."""
        self._stop.requested = False  # the supervisor's request, if any, is not this worker's
        signal.signal(signal.SIGTERM, self._terminate_worker)  # a worker told to stop drains like on a shutdown
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's ^C reaches the supervisor, which drains in order
        _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != self._pid:
            os._exit(1)
        _libc.prctl(_PR_SET_NAME, ctypes.c_char_p(f"fh-{worker.name}".encode()[:15]), 0, 0, 0)
        self.state_file.close()  # our copy of the lock descriptor: the supervisor holds the lock
        if self._metrics:
            self._metrics.close_listener()
        self._stop.close()
        worker.target()

    def _terminate_worker(self, *_: object) -> None:
        self._stop.request()

    def _start(self, worker: Worker) -> None:
        process = self._context.Process(target=self._child_main, args=(worker,), name=worker.name, daemon=False)
        process.start()
        worker.process = process
        worker.started = time.monotonic()
        worker.handle = None

    # ------------------------------------------------------------ supervision

    def stop(self) -> None:
        """Ask for a clean shutdown; safe from a signal handler."""
        self._stop.request()

    def run(self) -> None:
        for worker in self.workers:
            self._start(worker)
        if self._metrics:
            self._metrics.start()
        try:
            while not self._stop.requested:
                sentinels = [w.process.sentinel for w in self.workers if w.process is not None]
                # typeshed's wait() takes a Connection, socket or int; it (as documented) takes anything with fileno()
                multiprocessing.connection.wait(sentinels + [self._stop], timeout=1.0)  # type: ignore[list-item]
                self._stop.clear_wakeups()
                if self._stop.requested:
                    break
                for worker in self.workers:
                    if worker.process is not None and not worker.process.is_alive():
                        self._restart(worker)
            self._drain()
        finally:
            self._shutdown()

    def _restart(self, worker: Worker) -> None:
        process = worker.process
        assert process is not None  # only a started worker is restarted
        code = process.exitcode
        process.join(0)
        wait = worker.started + RESTART_SPACING - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        worker.restarts += 1
        print(f"fyrehose backbone: {worker.name} (pid {process.pid}) exited with {code}; restarting",
              file=sys.stderr, flush=True)
        self._start(worker)

    def _drain(self) -> None:
        """Stop the stages in pipeline order, each within STAGE_TIMEOUT."""
        for stage, bells in ((0, self.receiver_bells), (1, [self.sequencer_bell]), (2, self.fanout_bells)):
            members = [w for w in self.workers if w.stage == stage]
            for worker in members:
                self.stop_flags[worker.block] = True
            for bell in bells:
                bell.ring()
            deadline = time.monotonic() + STAGE_TIMEOUT
            for worker in members:
                if worker.process is None:
                    continue
                worker.process.join(max(0.0, deadline - time.monotonic()))
                if worker.process.is_alive():
                    worker.process.kill()
                    worker.process.join(1.0)

    def _shutdown(self) -> None:
        for worker in self.workers:
            if worker.process is not None and worker.process.is_alive():
                worker.process.kill()
                worker.process.join(1.0)
        if self._metrics:
            self._metrics.stop()
        self.state_file.write(self.sequencer_state.last_issued)
        self.state_file.close()
        for sock in self.sockets:
            sock.close()
        for bell in (self.sequencer_bell, *self.receiver_bells, *self.fanout_bells):
            bell.close()
        self._stop.close()

    # ------------------------------------------------------------ metrics (a thread of the supervisor)

    def _collect(self) -> list[Metric]:
        total: dict[str, int] = {}
        for block in self.counter_blocks:
            for name, value in block.load().items():
                total[name] = total.get(name, 0) + value
        processes = {"supervisor": self._process}
        for worker in self.workers:
            process = worker.process
            if process is None or process.pid is None:
                continue
            if worker.handle is None or worker.handle.pid != process.pid:
                try:
                    worker.handle = psutil.Process(process.pid)
                except psutil.Error:
                    continue
            processes[worker.name] = worker.handle
        rings = {f"receiver-{i}": ring.fill() for i, ring in enumerate(self.input_rings)}
        rings["log"] = self.log.fill()
        return (
            counter_metrics(total)
            + client_metrics(self.sequencer_state.gauges(), self.sequencer_state.last_issued)
            + process_metrics(processes)
            + ring_metrics(rings)
            + restart_metrics({w.name: w.restarts for w in self.workers})
        )


PIPELINE_MIN_CPUS = 4  # a core for each of receive, sequence and fan-out, and one for everything else


def auto_workers(cpus: int | None = None) -> int:
    """``--workers auto``: the faster layout for a host with ``cpus`` logical CPUs.

    Below PIPELINE_MIN_CPUS the pipeline's processes would wait for each
    other's CPU at every hand-over, and one process that does everything wins
    (docs/operations.md: 0.46x on 2 cores); from there on, the pipeline sized
    by :func:`default_sizes`.
    """
    cpus = cpus or psutil.cpu_count(logical=True) or 1
    return 0 if cpus < PIPELINE_MIN_CPUS else default_sizes(cpus)[0]


def default_sizes(cpus: int | None = None, workers: int | None = None) -> tuple[int, int]:
    """(receive workers, fan-out workers) for a host with ``cpus`` logical CPUs.

    One CPU goes to the sequencer; of the rest, a third receives and two thirds
    fan out (fan-out sends every message once per subscriber, receiving once).
    """
    cpus = cpus or psutil.cpu_count(logical=True) or 1
    spare = max(2, cpus - 1)
    receive = workers if workers else max(1, spare // 3)
    return receive, max(1, spare - receive)


def run_multiprocess(options: Options, state_file: SequenceStateFile, reserved: int) -> int:
    supervisor = Supervisor(options, state_file, reserved)
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: supervisor.stop())
    announce_ready("backbone", supervisor.address,
                   f"{options.workers} receive workers, {options.fanout} fan-out workers, supervisor pid "
                   f"{os.getpid()}, next sequence {reserved + 1}, state {state_file.directory}")
    supervisor.run()
    print(f"fyrehose backbone stopped at sequence {supervisor.sequencer_state.last_issued}",
          file=sys.stderr, flush=True)
    return 0
