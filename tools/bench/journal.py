"""``fyrehose journal bench``: the journal's figures, measured the same way on any machine.

It starts its own backbone and journal processes on loopback (in a temporary
directory), then, per run and per fsync mode (modes alternate within a run):

- **journaled msgs/s**: a confirmed publisher sends ``--messages`` payloads of
  ``--size`` bytes as fast as confirmations allow; the figure is messages
  divided by the time from the first publish until the last message is in the
  journal's segment file (written; with ``always`` also fsynced batch by batch).
  When the journal keeps up, this is the publisher's rate and the **lag** (last
  confirm to last record written) stays small; the **write path** figure is the
  journal's storage alone (ordered events to segment files with the same fsync
  mode, in the bench's own process) and shows the headroom;
- **FORWARD service rate from disk**: once everything is written, REQUESTs for
  ``--forward-messages`` old sequences go to the backbone from a plain socket;
  the backbone FORWARDs them to the journal (the only journaling client), which
  reads them from disk and re-DELIVERs them, paced at ``--forward-rate``.  The
  figure is messages received divided by the time from the first REQUEST to
  the last DELIVER.

Medians over ``--runs`` are printed as a table (or JSON with ``--json``).
"""
from __future__ import annotations

import argparse
import os
import platform
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

from fyrehose.errors import CommandFailed, InputError
from fyrehose.journal.store import FSYNC_MODES
from fyrehose.runtime.process import FYREHOSE, ChildProcess, wait_until
from fyrehose.runtime.readiness import free_port

CATCH_UP_TIMEOUT = 120.0
FORWARD_IDLE = 2.0  # seconds without a DELIVER that end the FORWARD measurement
REQUEST_SPAN = 8192  # what a subscriber asks for at once


def add_bench_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--messages", type=int, default=200_000, metavar="N", help="messages per run (default 200000)")
    parser.add_argument("--size", type=int, default=64, metavar="BYTES", help="payload size (default 64)")
    parser.add_argument("--runs", type=int, default=3, metavar="R", help="runs per fsync mode; medians are shown (default 3)")
    parser.add_argument("--fsync", default="interval,always", metavar="MODES",
                        help="comma-separated fsync modes to compare (default interval,always)")
    parser.add_argument("--forward-messages", type=int, default=100_000, metavar="N",
                        help="old messages to REQUEST back per run; 0 skips the FORWARD figure (default 100000)")
    parser.add_argument("--forward-rate", type=float, default=10_000_000, metavar="N",
                        help="the journal's --forward-rate during the bench (default 10000000: effectively unpaced, "
                             "to measure the disk path rather than the pacing)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")


def run_bench(args: argparse.Namespace) -> int:
    import json

    modes = [mode.strip() for mode in args.fsync.split(",") if mode.strip()]
    if not modes or any(mode not in FSYNC_MODES for mode in modes):
        raise InputError(f"--fsync takes a comma-separated list of {', '.join(FSYNC_MODES)}")
    if args.messages < 1 or args.runs < 1 or not 0 <= args.size <= 65498 or args.forward_messages < 0:
        raise InputError("--messages and --runs must be at least 1, --size within 0..65498, "
                         "--forward-messages 0 or more")
    if args.forward_messages > args.messages:
        raise InputError("--forward-messages cannot exceed --messages")
    if args.forward_rate <= 0:
        raise InputError("--forward-rate must be positive")
    results: dict[str, list[dict]] = {mode: [] for mode in modes}
    with tempfile.TemporaryDirectory(prefix="fyrehose-journal-bench-") as tmp:
        root = Path(tmp)
        backbone = _start(root / "backbone.log", ["backbone", "--listen", f"127.0.0.1:{free_port()}",
                                                           "--state-dir", str(root / "backbone-state")])
        try:
            address = backbone.argv[backbone.argv.index("--listen") + 1]
            for run in range(args.runs):
                order = modes if run % 2 == 0 else modes[::-1]
                for mode in order:
                    directory = root / f"journal-{mode}-{run}"
                    results[mode].append(_measure(address, directory, mode, args))
                    sys.stderr.write(f"run {run + 1}/{args.runs} fsync={mode}: "
                                     f"{results[mode][-1]['journaled_per_s']:.0f} journaled msgs/s\n")
        finally:
            backbone.stop()
    summary = _summarise(results, args)
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        _print_table(summary)
    return 0


def _measure(address: str, directory: Path, mode: str, args: argparse.Namespace) -> dict:
    from fyrehose.drivers.client import Client
    from fyrehose.protocol import codec

    journal = _start(directory.with_suffix(".log"), [
        "journal", "--backbone", address, "--dir", str(directory), "--fsync", mode, "--no-parquet",
        "--forward-rate", str(args.forward_rate), "--segment-size", "1GiB"])
    try:
        with Client(address, subscribe=False, unreachable_after=10.0) as publisher:
            warmup = _warm_up(publisher, directory, journal, args.size)
            baseline = _journal_bytes(directory)
            payloads = [os.urandom(args.size) for _ in range(min(args.messages, 4096))]
            started = time.perf_counter()
            last = warmup
            for start in range(0, args.messages, 2048):
                count = min(2048, args.messages - start)
                batch = [payloads[(start + i) % len(payloads)] for i in range(count)]
                last = publisher.publish_many(batch, window=2048)[-1]
            published = time.perf_counter()
            expected = baseline + (codec.FRAME_HEADER + args.size) * args.messages  # frames alone: a lower bound
            wait_until(lambda: _running(journal) and _journal_bytes(directory) >= expected
                       and _last_sequence(directory) == last, CATCH_UP_TIMEOUT,
                       f"the journal writing sequence {last} (log {journal.log})", interval=0.002)
            written = time.perf_counter()
        if _last_sequence(directory) != last:
            raise CommandFailed(f"the journal's last record is not sequence {last}; see {journal.log}")
        result = {
            "messages": args.messages,
            "journaled_per_s": args.messages / (written - started),
            "published_per_s": args.messages / (published - started),
            "lag_s": written - published,
            "write_path_per_s": _measure_write_path(directory.with_name(directory.name + "-store"), mode, args),
        }
        if args.forward_messages:
            result.update(_measure_forward(address, warmup + 1, warmup + args.forward_messages))
        return result
    finally:
        journal.stop()


def _measure_write_path(directory: Path, mode: str, args: argparse.Namespace) -> float:
    """Messages/s through the journal's storage alone, in this process: DELIVER datagrams as the backbone
    packs them (up to 64 KiB) appended to segments with the same fsync mode, in writes of up to 256 datagrams."""
    from fyrehose.journal.store import JournalStore
    from fyrehose.protocol.codec import MAX_DATAGRAM, encode_deliver, put_consecutive_u48
    from fyrehose.protocol.frame_run import FrameRun

    store = JournalStore(directory, fsync=mode)
    store.open()
    payload = os.urandom(args.size)
    step = len(encode_deliver(1, payload))
    per_datagram = max(1, MAX_DATAGRAM // step)
    template = b"".join(encode_deliver(1, payload) for _ in range(per_datagram))
    try:
        started = time.perf_counter()
        seq = 1
        batch: list = []
        while seq <= args.messages:
            count = min(per_datagram, args.messages - seq + 1)
            frames = bytearray(template[:count * step])
            put_consecutive_u48(frames, 3, step, seq, count)  # what the backbone's sequencing does
            batch.append(FrameRun(seq, count, step, bytes(frames)))
            seq += count
            if len(batch) == 256 or seq > args.messages:
                store.write(batch)
                store.handle_timers(time.monotonic())
                batch = []
        store.sync()
        return args.messages / (time.perf_counter() - started)
    finally:
        store.close()


def _warm_up(publisher, directory: Path, journal: ChildProcess, size: int) -> int:
    """Publish until the journal has written one message (it has subscribed); the last sequence it holds."""
    deadline = time.monotonic() + CATCH_UP_TIMEOUT
    last = publisher.publish(b"w" * size)
    while not _journal_bytes(directory):
        if not journal.alive() or time.monotonic() > deadline:
            raise CommandFailed(f"the journal did not start: {_tail(journal)}")
        time.sleep(0.2)
        last = publisher.publish(b"w" * size)
    wait_until(lambda: _running(journal) and _last_sequence(directory) == last, CATCH_UP_TIMEOUT,
               f"the journal writing warm-up sequence {last} (log {journal.log})", interval=0.002)
    return last


def _measure_forward(address: str, first: int, last: int) -> dict:
    """REQUEST ``first..last`` from a plain socket and count what comes back, per datagram where the frames
    are of one size and consecutive (the journal's answers are), so the measuring side is not the limit."""
    from fyrehose.net.addresses import parse_hostport
    from fyrehose.protocol import codec

    backbone = parse_hostport(address)
    wanted = last - first + 1
    seen = bytearray(wanted)
    ones = b"\x01" * (codec.MAX_DATAGRAM // codec.FRAME_HEADER + 1)
    received = 0
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        sock.bind(("127.0.0.1", 0))
        sock.settimeout(FORWARD_IDLE)
        started = time.perf_counter()
        for low in range(first, last + 1, REQUEST_SPAN):
            sock.sendto(codec.encode(codec.Request("0.0.0.0", 0, low, min(last, low + REQUEST_SPAN - 1))), backbone)
        finished = started
        while received < wanted:
            try:
                data, _ = sock.recvfrom(65536)
            except TimeoutError:
                break
            step = codec.uniform_step(data, codec.DELIVER)
            start = codec.consecutive_u48(data, 3, step, len(data) // step) if step else 0
            if start and first <= start and start + len(data) // step - 1 <= last:
                at = start - first
                seen[at:at + len(data) // step] = ones[:len(data) // step]
            else:
                for _, _, seq in codec.scan(data, codec.DELIVER)[0]:
                    if first <= seq <= last:
                        seen[seq - first] = 1
            received = seen.count(1)  # a C-level count: a few µs per datagram
            finished = time.perf_counter()
    elapsed = finished - started
    return {
        "forward_requested": wanted,
        "forward_received": received,
        "forward_per_s": received / elapsed if elapsed > 0 else 0.0,
    }


def _journal_bytes(directory: Path) -> int:
    segments = directory / "segments"
    if not segments.is_dir():
        return 0
    return sum(entry.stat().st_size for entry in os.scandir(segments) if entry.name.endswith(".log"))


def _last_sequence(directory: Path) -> int | None:
    from fyrehose.journal.reader import FileScan

    logs = sorted((directory / "segments").glob("seg-*.log"))
    last = None
    for _, record in FileScan(logs[-1]):
        last = record.seq
    return last


def _running(journal: ChildProcess) -> bool:
    """True while the journal runs: a wait on what it writes ends at once, with its log, when it exits."""
    if not journal.alive():
        raise CommandFailed(f"the journal exited: {_tail(journal)}")
    return True


def _summarise(results: dict[str, list[dict]], args: argparse.Namespace) -> dict:
    def median(mode: str, key: str) -> float | None:
        values = [result[key] for result in results[mode] if key in result]
        return statistics.median(values) if values else None

    return {
        "machine": {"cores": os.cpu_count(), "cpu": _cpu_model(), "python": platform.python_version()},
        "messages": args.messages,
        "size": args.size,
        "runs": args.runs,
        "forward_rate_limit": args.forward_rate,
        "modes": {mode: {
            "journaled_per_s": median(mode, "journaled_per_s"),
            "published_per_s": median(mode, "published_per_s"),
            "lag_s": median(mode, "lag_s"),
            "write_path_per_s": median(mode, "write_path_per_s"),
            "forward_per_s": median(mode, "forward_per_s"),
            "forward_received": median(mode, "forward_received"),
            "forward_requested": median(mode, "forward_requested"),
        } for mode in results},
        "runs_detail": results,
    }


def _print_table(summary: dict) -> None:
    machine = summary["machine"]
    print(f"journal bench: {summary['messages']} messages of {summary['size']} bytes, median of "
          f"{summary['runs']} run(s); {machine['cores']} cores, {machine['cpu']}, Python {machine['python']}")
    print(f"{'fsync':<10} {'journaled msgs/s':>17} {'published msgs/s':>17} {'lag at end s':>13} "
          f"{'write path msgs/s':>18} {'FORWARD from disk msgs/s':>25} {'received/requested':>19}")
    for mode, figures in summary["modes"].items():
        forward = figures["forward_per_s"]
        forward_text = "-" if forward is None else f"{forward:.0f}"
        received = "-" if forward is None else f"{figures['forward_received']:.0f}/{figures['forward_requested']:.0f}"
        print(f"{mode:<10} {figures['journaled_per_s']:>17.0f} {figures['published_per_s']:>17.0f} "
              f"{figures['lag_s']:>13.3f} {figures['write_path_per_s']:>18.0f} {forward_text:>25} {received:>19}")
    print("journaled: publish -> written in the journal process; lag: last confirm -> last record written; "
          "write path: the storage alone, in-process")
    print(f"(FORWARD pacing limit during the bench: {summary['forward_rate_limit']:.0f} msgs/s)")


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def _start(log: Path, args: list[str]) -> ChildProcess:
    """A ``fyrehose`` subprocess of the bench, logging to ``log``, stopped by its PID."""
    log.parent.mkdir(parents=True, exist_ok=True)
    return ChildProcess(FYREHOSE + args, log)


def _tail(process: ChildProcess) -> str:
    return " | ".join(process.output().strip().splitlines()[-3:]) or "(no log)"
