"""``fyrehose bench``: argument parsing and the run from preflight to report."""
from __future__ import annotations

import argparse

from fyrehose.protocol.codec import MAX_PAYLOAD
from fyrehose.runtime.argtypes import (
    non_negative_duration,
    non_negative_int,
    positive_duration,
    positive_float,
    positive_int,
)
from fyrehose.tools.bench.client_mode import DEFAULT_CLIENT_TARGETS, parse_client_targets
from fyrehose.tools.bench.targets import DEFAULT_TARGETS, parse_targets
from fyrehose.tools.bench.wire import MIN_PAYLOAD


def _targets(text: str) -> str:
    """A list some mode takes; which mode is checked once the mode is known."""
    try:
        parse_targets(text)
    except ValueError as exc:
        try:
            parse_client_targets(text)
        except ValueError:
            raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _workers(text: str) -> int | str:
    return text if text == "auto" else positive_int(text)


def _cpus(text: str) -> tuple[int, ...]:
    """A CPU list as taskset takes it: ``0``, ``0,2``, ``2-3``."""
    cpus: set[int] = set()
    try:
        for part in text.split(","):
            low, dash, high = part.partition("-")
            first, last = int(low), int(high if dash else low)
            if first < 0 or last < first:
                raise ValueError
            cpus.update(range(first, last + 1))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a CPU list such as 0,2-3, got {text!r}") from None
    return tuple(sorted(cpus))


def _payload(text: str) -> int:
    value = positive_int(text)
    if not MIN_PAYLOAD <= value <= MAX_PAYLOAD:
        raise argparse.ArgumentTypeError(
            f"{value} is outside {MIN_PAYLOAD}..{MAX_PAYLOAD} (a payload carries a mark and an 8-byte timestamp)")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("mode", nargs="?", choices=("servers", "client", "failover", "compiled"), default="servers",
                        help="servers (default): the servers at their limits, driven by lean load generators; "
                             "client: each system through its own Python client (fyrehose.Client, redis-py, "
                             "nats-py), one publisher and one subscriber, messages/s end to end; failover: "
                             "takeovers of a standby pair in network namespaces it builds (needs root and "
                             "keepalived; --runs, --standby-sync, --rate; docs/benchmarks.md); compiled: each compiled module's "
                             "per-message calls against its own .py, in this process")
    parser.add_argument("--runs", type=positive_int, default=20, metavar="N",
                        help="failover: kills of the primary backbone, alternating the hosts (default 20)")
    parser.add_argument("--standby-sync", action="store_true",
                        help="failover: the pair in sync mode (the primary CONFIRMs what the standby holds)")
    parser.add_argument("--cost", action="store_true",
                        help="failover: only the standby's cost to the primary (its CPU per message at one rate, "
                             "throughput, CONFIRM latency, with and without the standby, --rounds alternated)")
    parser.add_argument("--pair-key", action="store_true",
                        help="failover: the members sign every pair datagram (backbone --pair-key)")
    parser.add_argument("--targets", type=_targets, metavar="LIST",
                        help="comma-separated, measured in this order each round: fyrehose (multi-process backbone), "
                             "fyrehose-single (--workers 0), redis, nats, fyrehose-nobatch / "
                             "fyrehose-single-nobatch for subscribers without BATCH, and redis-gateway / "
                             "nats-gateway (-2: two processes) for the gateways on a single-process backbone "
                             f"(default {DEFAULT_TARGETS}); "
                             f"client mode: the same without the nobatch ones, plus nats-callback (nats-py "
                             f"consuming with a callback) (default {DEFAULT_CLIENT_TARGETS})")
    parser.add_argument("--publishers", type=positive_int, default=1, metavar="N",
                        help="publisher processes (default 1)")
    parser.add_argument("--subscribers", type=positive_int, default=4, metavar="N",
                        help="subscriber processes (default 4)")
    parser.add_argument("--payload", type=_payload, default=64, metavar="BYTES",
                        help=f"payload size, {MIN_PAYLOAD}..{MAX_PAYLOAD} (default 64)")
    parser.add_argument("--duration", type=positive_duration, default=10.0, metavar="S",
                        help="seconds of publishing per step (default 10)")
    parser.add_argument("--rate", type=positive_float, metavar="R",
                        help="offer a fixed R msgs/s in total and measure throughput and latency there "
                             "(default: search for the highest rate sustained with < 0.1%% loss)")
    parser.add_argument("--latency-rate", type=positive_float, default=10_000.0, metavar="R",
                        help="fixed rate of the latency step after a search (default 10000)")
    parser.add_argument("--rounds", type=positive_int, default=3, metavar="N",
                        help="rounds; every target is measured once per round, figures are medians (default 3)")
    parser.add_argument("--search-steps", type=non_negative_int, default=4, metavar="N",
                        help="fixed-rate steps of the search after the unthrottled one (default 4)")
    parser.add_argument("--grace", type=non_negative_duration, default=0.25, metavar="S",
                        help="how long after the publishers stop a message may still arrive and count "
                             "(default 0.25)")
    parser.add_argument("--workers", type=_workers, default="auto", metavar="R",
                        help="--workers of the multi-process backbone (targets fyrehose, fyrehose-nobatch): "
                             "a count or 'auto' (default auto: the multi-process layout sized to the CPUs)")
    parser.add_argument("--fanout", type=positive_int, metavar="F",
                        help="--fanout of the multi-process backbone (default: the backbone's own)")
    parser.add_argument("--server-cpus", type=_cpus, metavar="LIST",
                        help="pin every target's server (all its processes) to these CPUs, e.g. 0 or 0-1: peers "
                             "tuned the same way (docs/operations.md, host tuning)")
    parser.add_argument("--generator-cpus", type=_cpus, metavar="LIST",
                        help="pin the publishers and subscribers to these CPUs")
    parser.add_argument("--drop-every", type=non_negative_int, default=0, metavar="N",
                        help="fyrehose subscribers discard one DELIVER datagram in N as if the network lost it, so "
                             "the recovery column measures holes at the step's rate (default 0: none); the "
                             "discarded ones count as loss before recovery (with --journal: one more subscriber "
                             "does so on a backbone with --recent-bytes 0, so only the journals can fill its holes)")
    parser.add_argument("--trace", metavar="DIR",
                        help="single-process backbones (fyrehose-single) write a stage trace of every step into "
                             "DIR, one STEP.trace each (python -m fyrehose.backbone.single.trace FILE; docs/operations.md)")
    parser.add_argument("--messages", type=positive_int, default=300_000, metavar="N",
                        help="client mode: messages the publisher publishes (default 300000)")
    parser.add_argument("--batch", type=positive_int, default=1000, metavar="N",
                        help="client mode: messages per publish_many / pipeline / flush (default 1000)")
    parser.add_argument("--multicast", action="store_true",
                        help="unicast against multicast delivery (backbone --multicast) for 4, 8 and 16 "
                             "subscribers: the backbone's CPU per message and msgs/s per subscriber, in a network "
                             "namespace of its own (needs root and iproute2; docs/benchmarks.md)")
    parser.add_argument("--journal", type=non_negative_int, default=0, metavar="N",
                        help="instead of the targets: N journals on the single-process backbone, offered --rate "
                             "(default: as fast as the publishers can) for --duration s; per journal, journaled "
                             "msgs/s, lag behind the backbone's HEAD and permanent loss (docs/journal.md)")
    parser.add_argument("--journal-fsync", choices=("always", "interval", "never"), default="interval",
                        help="with --journal: the journals' --fsync (default interval)")
    parser.add_argument("--catch-up", type=positive_duration, default=30.0, metavar="S",
                        help="with --journal: how long after publishing the journals may take to reach the HEAD "
                             "(default 30)")
    parser.add_argument("--modules", metavar="LIST",
                        help="compiled mode: comma-separated modules to time (default: every compiled module)")
    parser.add_argument("--case-seconds", type=positive_duration, default=0.2, metavar="S",
                        help="compiled mode: seconds each case runs per build and round (default 0.2)")
    parser.add_argument("--validate-addresses", action="store_true",
                        help="run every fyrehose backbone with --validate-addresses (its cost on the stream)")
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON to FILE")


def run(args: argparse.Namespace) -> int:
    import json
    import signal
    import sys
    import tempfile
    from pathlib import Path

    from fyrehose.tools.bench import client_mode, report
    from fyrehose.tools.bench.orchestra import BenchSettings, preflight, run_rounds
    from fyrehose.tools.bench.servers import PACKAGES, locate, version
    from fyrehose.tools.bench.targets import BenchError

    if args.validate_addresses and (args.multicast or args.journal or args.mode != "servers"):
        raise BenchError("--validate-addresses is for the servers bench (fyrehose bench [servers])")
    if args.multicast:
        from fyrehose.tools.bench.multicast import run_multicast

        return run_multicast(args)
    if args.mode == "failover":
        return _run_failover(args)
    if args.journal:
        return _run_journals(args)
    if args.mode == "compiled":
        return _run_compiled(args)
    client = args.mode == "client"
    try:
        if client:
            targets = parse_client_targets(args.targets or DEFAULT_CLIENT_TARGETS)
        else:
            targets = parse_targets(args.targets or DEFAULT_TARGETS)
    except ValueError as exc:
        raise BenchError(f"--targets: {exc}") from None
    if args.trace:
        Path(args.trace).mkdir(parents=True, exist_ok=True)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).touch()  # a path that cannot be written fails now, not after the whole run
    # SIGTERM unwinds like Ctrl-C, so every server and load generator is stopped on the way out.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    binaries = {}
    versions = {}
    for protocol in sorted({target.protocol for target in targets}):
        if protocol in PACKAGES:
            binary, package = PACKAGES[protocol]
            binaries[protocol] = locate(binary, package)
            versions[binary] = version(binaries[protocol])
    machine = report.machine_info(versions)
    with tempfile.TemporaryDirectory(prefix="fyrehose-bench-") as workdir:
        if client:
            client_settings = client_mode.ClientSettings(
                targets=targets, messages=args.messages, batch=args.batch, payload=args.payload,
                rounds=args.rounds, workers=args.workers, fanout=args.fanout)
            doc = client_mode.document(client_settings, machine,
                                       client_mode.run_rounds(client_settings, binaries, Path(workdir)))
            client_mode.write_table(doc, sys.stdout)
        else:
            settings = BenchSettings(
                targets=targets, publishers=args.publishers, subscribers=args.subscribers, payload=args.payload,
                duration=args.duration, rate=args.rate, latency_rate=args.latency_rate, rounds=args.rounds,
                search_steps=args.search_steps, grace=args.grace, workers=args.workers, fanout=args.fanout,
                trace=args.trace, server_cpus=args.server_cpus, generator_cpus=args.generator_cpus,
                drop_every=args.drop_every,
                backbone_options=("--validate-addresses",) if args.validate_addresses else (),
            )
            preflight(settings, binaries, Path(workdir) / "preflight")
            doc = report.document(settings, machine, run_rounds(settings, binaries, Path(workdir) / "run"))
            report.write_table(doc, sys.stdout)
    if args.json:
        Path(args.json).write_text(json.dumps(doc, indent=2) + "\n")
    return 0


def _run_failover(args: argparse.Namespace) -> int:
    import json
    import signal
    import sys
    import tempfile
    from pathlib import Path

    from fyrehose.tools.bench.failover import FailoverSettings, run_failover, write_table

    settings = FailoverSettings(runs=args.runs, rate=args.rate or 1000.0, sync=args.standby_sync, key=args.pair_key,
                                cost_only=args.cost, cost_rounds=args.rounds)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).touch()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    # under /var/tmp, not /tmp's per-session copies: keepalived runs only scripts no one but root can change
    with tempfile.TemporaryDirectory(prefix="fyrehose-failover-", dir="/var/tmp") as workdir:
        os_workdir = Path(workdir)
        os_workdir.chmod(0o755)
        doc = run_failover(settings, os_workdir, sys.stdout)
    if not args.cost:
        write_table(doc, sys.stdout)
    if args.json:
        Path(args.json).write_text(json.dumps(doc, indent=2) + "\n")
    return 0


def _run_compiled(args: argparse.Namespace) -> int:
    import json
    import sys
    from pathlib import Path

    from fyrehose.errors import InputError
    from fyrehose.tools.bench import compiled

    requested = [name.strip() for name in args.modules.split(",") if name.strip()] if args.modules else None
    try:
        modules = compiled.compiled_modules(requested)
    except ValueError as exc:
        raise InputError(f"bench compiled: {exc}") from None
    doc = compiled.document(compiled.measure(modules, args.rounds, args.case_seconds), args.rounds,
                            args.case_seconds)
    compiled.write_table(doc, sys.stdout)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(doc, indent=2) + "\n")
    return 0


def _run_journals(args: argparse.Namespace) -> int:
    import json
    import signal
    import sys
    import tempfile
    from pathlib import Path

    from fyrehose.tools.bench import journal_mode, report

    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).touch()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    settings = journal_mode.JournalSettings(
        journals=args.journal, publishers=args.publishers, payload=args.payload, duration=args.duration,
        rate=args.rate, rounds=args.rounds, catch_up=args.catch_up, fsync=args.journal_fsync,
        drop_every=args.drop_every)
    with tempfile.TemporaryDirectory(prefix="fyrehose-bench-journal-") as workdir:
        doc = journal_mode.document(settings, report.machine_info({}),
                                    journal_mode.run_rounds(settings, Path(workdir)))
    journal_mode.write_table(doc, sys.stdout)
    if args.json:
        Path(args.json).write_text(json.dumps(doc, indent=2) + "\n")
    return 0
