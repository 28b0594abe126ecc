"""``fyrehose backbone``: argument parsing and start-up of the chosen driver."""
from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING

from fyrehose.backbone.host.multicast import DEFAULT_TTL, GroupOptions
from fyrehose.backbone.host.udp import SOCKET_BUFFER
from fyrehose.backbone.pair.frames import MIN_KEY
from fyrehose.backbone.pair.primary import DETACH_AFTER
from fyrehose.backbone.recent_log import DEFAULT_BYTES as RECENT_BYTES
from fyrehose.backbone.single.trace import DEFAULT_EVERY, StageTrace
from fyrehose.errors import InputError
from fyrehose.net.addresses import parse_group, parse_hostport, parse_networks, resolve_ipv4
from fyrehose.protocol.codec import FRAME_HEADER, MAX_DATAGRAM
from fyrehose.runtime.argtypes import positive_duration

if TYPE_CHECKING:
    from fyrehose.backbone.single.driver import PairOptions

DEFAULT_LISTEN = "127.0.0.1:2323"
# A fresh key at every start: a restarted backbone, or a promoted standby, refuses the cookies of the one before,
# and each client gets a new one in one round trip (docs/protocol.md, Address validation).
COOKIE_KEY_BYTES = 32


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--listen", default=DEFAULT_LISTEN, metavar="HOST:PORT",
                        help=f"UDP address to serve (default {DEFAULT_LISTEN})")
    parser.add_argument("--workers", type=_workers, default=0, metavar="R",
                        help="receive worker processes; 0 runs everything in one process (default 0); "
                             "'auto' picks the faster layout for the CPU count: one process below 4 CPUs, "
                             "else R sized from the CPUs")
    parser.add_argument("--fanout", type=int, default=None, metavar="F",
                        help="fan-out worker processes when R > 0 (default: the CPUs left after the receive "
                             "workers and the sequencer, at least 1)")
    parser.add_argument("--state-dir", metavar="DIR",
                        help="where the sequence high-water mark is kept "
                             "(default ~/.local/state/fyrehose/backbone-HOST-PORT)")
    parser.add_argument("--metrics", metavar="HOST:PORT",
                        help="serve Prometheus metrics over HTTP at this address")
    parser.add_argument("--trust-net", action="append", default=[], metavar="CIDR",
                        help="sources in this network may name another address in KEEPALIVE/REQUEST "
                             "(repeatable; default: nobody may)")
    parser.add_argument("--validate-addresses", action="store_true",
                        help="serve an address outside the --trust-net networks only once it echoed a cookie sent "
                             "to it, so that a KEEPALIVE with a forged source cannot aim the stream at a stranger "
                             "(every fyrehose client echoes it; docs/protocol.md, Address validation)")
    parser.add_argument("--batch-bytes", type=int, default=MAX_DATAGRAM, metavar="N",
                        help=f"largest datagram packed for BATCH subscribers (default {MAX_DATAGRAM}; "
                             "1472 avoids IP fragmentation on a 1500-byte MTU)")
    parser.add_argument("--max-clients", type=int, default=65536, metavar="N",
                        help="capacity of the client table (default 65536)")
    parser.add_argument("--socket-buffer", type=int, default=SOCKET_BUFFER, metavar="BYTES",
                        help=f"receive and send buffer asked for each UDP socket (default {SOCKET_BUFFER}; the "
                             "kernel doubles it, and caps it at net.core.[rw]mem_max unless run as root)")
    parser.add_argument("--recent-bytes", type=int, default=RECENT_BYTES, metavar="BYTES",
                        help="the backbone's own log of recent messages, for REQUESTs no journaling client "
                             f"answers (last-resort re-delivery; default {RECENT_BYTES}, 0: off)")
    parser.add_argument("--multicast", metavar="GROUP:PORT",
                        help="also send every DELIVER datagram once to this IPv4 multicast group (e.g. "
                             "239.255.0.1:2324); subscribers that joined it get no unicast DELIVERs "
                             "(docs/operations.md, Multicast)")
    parser.add_argument("--multicast-ttl", type=int, default=DEFAULT_TTL, metavar="N",
                        help=f"hops the group's datagrams may cross (default {DEFAULT_TTL}: the local network)")
    parser.add_argument("--multicast-interface", metavar="ADDR",
                        help="address of the interface the group's datagrams leave from (default: the "
                             "--listen address's interface)")
    parser.add_argument("--trace", type=Path, metavar="FILE",
                        help="--workers 0 only: write the stage timestamps of sampled datagrams here, one JSON line "
                             "each (python -m fyrehose.backbone.single.trace FILE reports them; docs/operations.md)")
    parser.add_argument("--trace-every", type=int, default=DEFAULT_EVERY, metavar="N",
                        help=f"with --trace: one PUSH datagram in N (default {DEFAULT_EVERY})")
    parser.add_argument("--pair", metavar="HOST:PORT",
                        help="run as one member of a hot standby pair: this host's own address for the pair's "
                             "replication traffic; the member starts as standby, binds --listen (the virtual IP) "
                             "before holding it, and is promoted by SIGUSR1 (docs/operations.md, A hot standby "
                             "pair); needs --peer and --workers 0")
    parser.add_argument("--peer", metavar="HOST:PORT", help="the other member's --pair address")
    parser.add_argument("--standby-sync", action="store_true",
                        help="CONFIRM and DELIVER only what the standby holds, so a confirmed message survives the "
                             "loss of either host (default: asynchronous)")
    parser.add_argument("--standby-timeout", type=positive_duration, default=DETACH_AFTER, metavar="SECONDS",
                        help=f"the primary goes on alone after its standby was silent this long (default "
                             f"{DETACH_AFTER})")
    parser.add_argument("--pair-key", type=Path, metavar="FILE",
                        help="a secret both members share (at least 16 bytes, e.g. from /dev/urandom): every pair "
                             "datagram is signed with it and unsigned ones are dropped; without it the pair trusts "
                             "its peer's source address (docs/operations.md, A hot standby pair)")
    parser.add_argument("--rate-limit", type=float, default=0, metavar="N",
                        help="datagrams/s accepted from each source IP, bursts of one second's worth; the rest "
                             "are dropped and counted (default 0: off; with R receive workers, a source "
                             "spreading its ports over all of them can get R times N through)")


def _workers(text: str) -> int | str:
    if text == "auto":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number or 'auto', got {text!r}") from None


def run(args: argparse.Namespace) -> int:
    from fyrehose.backbone.cookies import CookieJar
    from fyrehose.backbone.core import Backbone
    from fyrehose.backbone.host.statefile import SequenceStateFile, default_state_dir

    listen = parse_hostport(args.listen)
    metrics = parse_hostport(args.metrics) if args.metrics else None
    trusted = parse_networks(args.trust_net)
    if args.batch_bytes < FRAME_HEADER or args.batch_bytes > MAX_DATAGRAM:
        raise InputError(f"--batch-bytes must be between {FRAME_HEADER} and {MAX_DATAGRAM}")
    if args.max_clients < 1:
        raise InputError("--max-clients must be at least 1")
    if args.socket_buffer < 4096:
        raise InputError("--socket-buffer must be at least 4096 bytes")
    if args.recent_bytes < 0:
        raise InputError("--recent-bytes must be 0 (off) or more")
    if args.rate_limit < 0:
        raise InputError("--rate-limit must be positive (0: off)")
    if args.trace_every < 1:
        raise InputError("--trace-every must be at least 1")
    if args.workers != "auto" and args.workers < 0:
        raise InputError("--workers must be 0 or more (or 'auto')")
    if args.fanout is not None and args.fanout < 1:
        raise InputError("--fanout must be at least 1")
    if args.workers == 0 and args.fanout is not None:
        raise InputError("--fanout needs --workers 1 or more (with --workers 0 one process does everything)")
    group = _group_options(args)
    pair = _pair_options(args)
    if args.workers == "auto":
        from fyrehose.backbone.multiprocess.supervisor import auto_workers, default_sizes

        # --fanout asks for the pipeline: then auto only sizes it
        args.workers = default_sizes()[0] if args.fanout is not None else auto_workers()
    if args.trace is not None and args.workers != 0:
        raise InputError("--trace needs the single-process backbone (--workers 0)")
    if pair is not None and args.workers != 0:
        raise InputError("--pair needs the single-process backbone (--workers 0)")
    try:
        trace = StageTrace(args.trace, args.trace_every) if args.trace is not None else None
    except OSError as exc:
        raise InputError(f"--trace {args.trace}: {exc.strerror or exc}") from None
    cookie_key = os.urandom(COOKIE_KEY_BYTES) if args.validate_addresses else None
    state = SequenceStateFile(args.state_dir or default_state_dir(*listen))
    reserved = state.open()
    if args.workers != 0:
        from fyrehose.backbone.multiprocess.supervisor import Options, default_sizes, run_multiprocess

        workers, fanout = default_sizes(workers=args.workers)
        options = Options(listen, workers, args.fanout or fanout, trusted, args.batch_bytes, args.max_clients, metrics,
                          args.rate_limit, args.socket_buffer, args.recent_bytes, group, cookie_key)
        try:
            return run_multiprocess(options, state, reserved)
        finally:
            state.close()
    backbone = Backbone(
        reserved=reserved,
        trusted_networks=trusted,
        batch_bytes=args.batch_bytes,
        client_capacity=args.max_clients,
        rate_limit=args.rate_limit,
        recent_bytes=args.recent_bytes,
        multicast=group.group if group is not None else None,
        cookies=CookieJar(cookie_key) if cookie_key is not None else None,
    )
    from fyrehose.backbone.single.driver import run_single

    return run_single(backbone, listen, state, metrics, args.socket_buffer, group, trace, pair)


def _pair_options(args: argparse.Namespace) -> PairOptions | None:
    from fyrehose.backbone.single.driver import PairOptions

    if args.pair is None:
        if args.peer is not None or args.standby_sync or args.standby_timeout != DETACH_AFTER or args.pair_key:
            raise InputError("--peer, --pair-key, --standby-sync and --standby-timeout need --pair HOST:PORT")
        return None
    if args.peer is None:
        raise InputError("--pair needs --peer HOST:PORT (the other member's pair address)")
    pair, peer = parse_hostport(args.pair), parse_hostport(args.peer)
    if pair == peer:
        raise InputError("--pair and --peer must be different addresses")
    key = None
    if args.pair_key is not None:
        try:
            key = args.pair_key.read_bytes().strip()
        except OSError as exc:
            raise InputError(f"--pair-key {args.pair_key}: {exc.strerror or exc}") from None
        if not MIN_KEY <= len(key) <= 64:
            raise InputError(f"--pair-key {args.pair_key}: a key is {MIN_KEY} to 64 bytes, not {len(key)}")
    return PairOptions(pair, peer, args.standby_sync, args.standby_timeout, key)


def _group_options(args: argparse.Namespace) -> GroupOptions | None:
    if args.multicast is None:
        if args.multicast_interface is not None or args.multicast_ttl != DEFAULT_TTL:
            raise InputError("--multicast-ttl and --multicast-interface need --multicast GROUP:PORT")
        return None
    if not 0 <= args.multicast_ttl <= 255:
        raise InputError("--multicast-ttl must be between 0 and 255")
    interface = resolve_ipv4(args.multicast_interface) if args.multicast_interface is not None else None
    return GroupOptions(parse_group(args.multicast), args.multicast_ttl, interface)
