"""A node's credentials: the users database file, and the options of a node that authenticates (the cache, the
gateways), one shape for all.

A node given ``--auth-db FILE --service NAME`` runs a session for ``--user``,
signs what it publishes and drops (and counts) every envelope of the stream
that fails verification, so what it serves was published by a holder of a
password in that database.
"""
from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING

from fyrehose.errors import InputError
from fyrehose.runtime.argtypes import positive_duration
from fyrehose.runtime.durable import replace_atomically
from fyrehose.subjects.auth import AuthDatabase, AuthError

if TYPE_CHECKING:
    from fyrehose.subjects.auth import Credentials

DEFAULT_SESSION_INTERVAL = 2.0


def add_auth_arguments(parser: argparse.ArgumentParser, default_user: str, role: str) -> None:
    """``--user``, ``--auth-db``, ``--service`` and ``--session-interval``; ``role`` names the node in the help."""
    parser.add_argument("--user", default=default_user, metavar="NAME",
                        help=f"user of this {role}'s session USER.NONCE (default {default_user})")
    parser.add_argument("--auth-db", metavar="FILE",
                        help="users database (fyrehose auth add): verify every envelope and sign what this "
                             f"{role} publishes")
    parser.add_argument("--service", metavar="NAME", help="service whose users --auth-db holds (with --auth-db)")
    parser.add_argument("--session-interval", type=positive_duration, default=DEFAULT_SESSION_INTERVAL, metavar="S",
                        help=f"seconds between this {role}'s session heartbeats (default {DEFAULT_SESSION_INTERVAL:g})")


def credentials_from(args: argparse.Namespace) -> Credentials | None:
    """The credentials the options name, or None without ``--auth-db``; ValueError (one line) when they cannot work.

    An unknown user is refused later, when the node's client starts its session.
    """
    from fyrehose.subjects.auth import Credentials

    if (args.auth_db is None) != (args.service is None):
        raise InputError("--auth-db and --service go together")
    if args.auth_db is None:
        return None
    return Credentials(load_auth_database(args.auth_db), args.user, args.service)


def load_auth_database(path: str | os.PathLike) -> AuthDatabase:
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise AuthError(f"no auth database at {path}") from None
    return AuthDatabase.from_json(data, str(path))


def save_auth_database(database: AuthDatabase, path: str | os.PathLike) -> None:
    """Write atomically, readable by the owner only (HA0 is as good as a password on this network)."""
    replace_atomically(Path(path), database.to_json(), mode=0o600)
