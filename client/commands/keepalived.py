"""``fyrehose keepalived``: keepalived.conf for one host of a hot standby backbone pair, and the scripts it runs.

Prints the configuration on stdout (redirect it to /etc/keepalived/keepalived.conf)
and writes the health check and the two notify scripts into ``--scripts-dir``,
where keepalived runs them as root.  The rendering is
:mod:`fyrehose.tools.deploy.keepalived`; docs/operations.md ("Deploying a
standby pair") says how the pieces fit.
"""
from __future__ import annotations

import argparse
import ipaddress
import sys
from pathlib import PurePosixPath

from fyrehose.runtime.argtypes import positive_duration, positive_int


def _ipv4(text: str) -> ipaddress.IPv4Address:
    try:
        return ipaddress.IPv4Address(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an IPv4 address") from None


def _ipv4_interface(text: str) -> ipaddress.IPv4Interface:
    if "/" not in text:
        raise argparse.ArgumentTypeError(f"{text!r} has no prefix length (ADDR/PREFIX, e.g. 10.0.0.100/24)")
    try:
        return ipaddress.IPv4Interface(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an IPv4 ADDR/PREFIX") from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from fyrehose.tools.deploy.keepalived import DEFAULT_ADVERT_INT, DEFAULT_ROUTER_ID, DEFAULT_SCRIPTS_DIR

    parser.add_argument("--vip", required=True, type=_ipv4_interface, metavar="ADDR/PREFIX",
                        help="the service address clients use, with its prefix length (e.g. 10.0.0.100/24)")
    parser.add_argument("--interface", required=True, metavar="IF", help="the interface the address goes on")
    parser.add_argument("--src", required=True, type=_ipv4, metavar="HOST_IP",
                        help="this host's own address on --interface (VRRP adverts leave from it)")
    parser.add_argument("--peer", required=True, type=_ipv4, metavar="PEER_IP",
                        help="the other host's address (VRRP adverts go to it, unicast)")
    parser.add_argument("--priority", required=True, type=positive_int, metavar="N",
                        help="1-254; when both hosts start together the higher takes the address, and then keeps "
                             "it (nopreempt)")
    parser.add_argument("--state-dir", required=True, type=PurePosixPath, metavar="DIR",
                        help="the backbone's --state-dir, where it keeps its pid and role files")
    parser.add_argument("--router-id", type=positive_int, default=DEFAULT_ROUTER_ID, metavar="N",
                        help=f"VRRP virtual router id, 1-255, the same on both hosts (default {DEFAULT_ROUTER_ID})")
    parser.add_argument("--advert-int", type=positive_duration, default=DEFAULT_ADVERT_INT, metavar="SECONDS",
                        help=f"seconds between VRRP adverts; a backup takes over after about 3 missed "
                             f"(default {DEFAULT_ADVERT_INT:g}, VRRPv3)")
    parser.add_argument("--auth-pass", metavar="TEXT",
                        help="VRRPv2 simple password (1-8 characters; needs a whole-second --advert-int): tells "
                             "pairs apart on one network, it is not a secret on the wire")
    parser.add_argument("--scripts-dir", type=PurePosixPath, default=DEFAULT_SCRIPTS_DIR, metavar="DIR",
                        help=f"where the check, promote and demote scripts are written; keepalived runs them as root, "
                             f"so every directory up to them must be root's (default {DEFAULT_SCRIPTS_DIR})")


def run(args: argparse.Namespace) -> int:
    from fyrehose.tools.deploy.files import write_scripts
    from fyrehose.tools.deploy.keepalived import KeepalivedHost, render_config

    member = KeepalivedHost(vip=args.vip, interface=args.interface, src=args.src, peer=args.peer, priority=args.priority,
                        state_dir=args.state_dir, scripts_dir=args.scripts_dir, router_id=args.router_id,
                        advert_int=args.advert_int, auth_pass=args.auth_pass)
    written = write_scripts(member)
    sys.stdout.write(render_config(member))
    sys.stderr.write(f"fyrehose keepalived: wrote {', '.join(str(path) for path in written)}\n")
    return 0
