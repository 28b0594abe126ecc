"""``fyrehose auth``: keep the users database (HA0 only, never passwords) and measure signing cost."""
from __future__ import annotations

import argparse
import getpass
import sys
import time
from pathlib import Path

from fyrehose.drivers.backbone_io import wall_us
from fyrehose.errors import CommandFailed, InputError
from fyrehose.runtime.argtypes import positive_int
from fyrehose.runtime.credentials import load_auth_database, save_auth_database


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True
    for name, text in (("add", "add a user of a service, or change its password"),
                       ("remove", "remove a user of a service")):
        action = actions.add_parser(name, help=text, description=text)
        action.add_argument("--db", required=True, metavar="FILE", help="the users database (JSON)")
        action.add_argument("--user", required=True, help="user name (one subject token)")
        action.add_argument("--service", required=True, help="service name")
        if name == "add":
            action.add_argument("--password-stdin", action="store_true",
                                help="read the password from the first line of stdin instead of the terminal")
    listing = actions.add_parser("list", help="print the users and services in a database",
                                 description="print USER<TAB>SERVICE per entry (never the hashes)")
    listing.add_argument("--db", required=True, metavar="FILE", help="the users database (JSON)")
    bench = actions.add_parser("bench", help="measure signing and verification per message",
                               description="time sign() and check() of envelopes of one session, in this process")
    bench.add_argument("--count", type=positive_int, default=20_000, metavar="N",
                       help="messages per measurement (default 20000)")
    bench.add_argument("--size", type=positive_int, default=100, metavar="BYTES",
                       help="data bytes per message (default 100)")


def _password(args: argparse.Namespace) -> str:
    if args.password_stdin:
        line = sys.stdin.readline()
        if not line:
            raise InputError("no password on stdin")
        return line.rstrip("\r\n")
    if not sys.stdin.isatty():
        raise InputError("no terminal to ask for the password: use --password-stdin")
    first = getpass.getpass(f"password for {args.user} ({args.service}): ")
    if getpass.getpass("again: ") != first:
        raise InputError("the passwords differ")
    return first


def run(args: argparse.Namespace) -> int:
    from fyrehose.subjects.auth import AuthDatabase

    if args.action == "bench":
        return _bench(args.count, args.size)
    path = Path(args.db)
    if args.action == "list":
        for user, service in load_auth_database(path).users():
            print(f"{user}\t{service}")
        return 0
    database = load_auth_database(path) if path.exists() else AuthDatabase()
    if args.action == "add":
        database.add(args.user, args.service, _password(args))
    elif not database.remove(args.user, args.service):
        raise InputError(f"{args.user} of {args.service} is not in {path}")
    save_auth_database(database, path)
    return 0


def _bench(count: int, size: int) -> int:
    from fyrehose.subjects.auth import AuthDatabase, Authenticator, Credentials
    from fyrehose.subjects.envelope import Envelope, decode, encode
    from fyrehose.subjects.session_table import LocalSession

    database = AuthDatabase()
    database.add("bench", "bench", "bench password")
    session = LocalSession("bench")
    authenticator = Authenticator(Credentials(database, "bench", "bench"), session)
    data = bytes(size)
    rows = []

    started = time.perf_counter()
    plain = [encode(session.stamp(Envelope("bench.subject", data))) for _ in range(count)]
    rows.append(("stamp + encode (no auth)", time.perf_counter() - started))

    started = time.perf_counter()
    signed = [encode(authenticator.sign(session.stamp(Envelope("bench.subject", data)))) for _ in range(count)]
    rows.append(("stamp + sign + encode", time.perf_counter() - started))

    started = time.perf_counter()
    for payload in plain:
        decode(payload)
    rows.append(("decode (no auth)", time.perf_counter() - started))

    started = time.perf_counter()
    wall = wall_us()
    accepted = sum(authenticator.check(decode(payload), wall).accepted for payload in signed)  # type: ignore[arg-type]  # the bench signs only envelopes, so decode() gives envelopes
    rows.append(("decode + check", time.perf_counter() - started))
    if accepted != count:
        raise CommandFailed(f"only {accepted} of {count} signed messages verified")

    print(f"{count} messages of {size} data bytes, one session, one core")
    print(f"{'step':<28}{'us/message':>12}{'messages/s':>14}")
    for name, seconds in rows:
        print(f"{name:<28}{seconds / count * 1e6:>12.2f}{count / seconds:>14,.0f}")
    return 0
