"""``fyrehose users``: keep the gateways' users file (``--users``): passwords and tokens as scrypt hashes, rights.

``add`` creates a user or changes one: the password (a new user's is asked on
the terminal; ``--password-stdin`` sets it from the first line of stdin, also
for a user that exists), a new token (``--token``:
printed once, on stdout, never stored in clear), and the rights, which replace
the user's rights when any is given.  ``remove`` deletes a user, ``list`` prints
each user with its kinds of credential and its rights (never a hash).  The
gateways re-read the file on SIGHUP (docs/security.md).
"""
from __future__ import annotations

import argparse
import getpass
import sys
from pathlib import Path

from fyrehose.errors import InputError
from fyrehose.gateways.access.permissions import Permissions
from fyrehose.gateways.access.secrets import hash_secret, new_token
from fyrehose.gateways.access.users import Entry, User, UsersFile, UsersFileError, check_user_name
from fyrehose.gateways.drivers.users_file import load_users
from fyrehose.runtime.durable import replace_atomically


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True
    add = actions.add_parser("add", help="add a user, or change its password, tokens or rights",
                             description="add a user, or change its password, tokens or rights")
    remove = actions.add_parser("remove", help="remove a user", description="remove a user")
    listing = actions.add_parser("list", help="print the users, their kinds of credential and their rights",
                                 description="print USER<TAB>CREDENTIALS<TAB>RIGHTS per user (never a hash)")
    for action in (add, remove, listing):
        action.add_argument("--file", required=True, metavar="FILE", help="the users file (JSON), as --users takes it")
    for action in (add, remove):
        action.add_argument("--user", required=True, help="user name (1-64 of letters, digits and _.@+-)")
    add.add_argument("--password-stdin", action="store_true",
                     help="set the password from the first line of stdin instead of asking on the terminal")
    add.add_argument("--no-password", action="store_true",
                     help="set no password (a user that logs in with a token or a client certificate, "
                          "or the --anonymous one); removes one it had")
    add.add_argument("--token", action="store_true", help="add a new token for the user and print it (once)")
    add.add_argument("--revoke-tokens", action="store_true", help="remove every token the user had")
    add.add_argument("--anonymous", action="store_true",
                     help="clients that send no credentials get this user's rights")
    for direction in ("publish", "subscribe"):
        add.add_argument(f"--{direction}", action="append", metavar="PATTERN",
                         help=f"a subject pattern the user may {direction} to (repeatable; * one token, > the rest); "
                              f"without any, every subject not denied")
        add.add_argument(f"--deny-{direction}", action="append", default=[], metavar="PATTERN",
                         help=f"a subject pattern the user may not {direction} to, whatever is allowed (repeatable)")


def run(args: argparse.Namespace) -> int:
    path = Path(args.file)
    if args.action == "list":
        users = load_users(path)
        for name, entry in sorted(users.entries.items()):
            print(f"{name}\t{_credentials(users, entry)}\t{_rights(entry.user)}")
        return 0
    users = load_users(path) if path.exists() else UsersFile()
    name = check_user_name(args.user)
    if args.action == "remove":
        if name not in users.entries:
            raise InputError(f"no user {name} in {path}")
        del users.entries[name]
        if users.anonymous == name:
            users.anonymous = None
    else:
        token = _add(users, name, args)
        if token is not None:
            print(token)
    replace_atomically(path, users.to_json(), mode=0o600)
    return 0


def _add(users: UsersFile, name: str, args: argparse.Namespace) -> str | None:
    """Change ``users`` as the options say; the new token, if one was asked for."""
    if args.password_stdin and args.no_password:
        raise InputError("--password-stdin and --no-password exclude each other")
    entry = users.entries.get(name)
    new = entry is None
    if entry is None:
        entry = users.entries[name] = Entry(User(name))
    if args.password_stdin or (new and not (args.no_password or args.token or args.anonymous)):
        entry.password = hash_secret(_password(args, name))
    elif args.no_password:
        entry.password = None
    if args.revoke_tokens:
        entry.tokens.clear()
    token = None
    if args.token:
        token, token_id, stored = new_token()
        entry.tokens[token_id] = stored
    if _rights_given(args):
        try:
            entry.user = User(name, Permissions.of(args.publish, args.deny_publish),
                              Permissions.of(args.subscribe, args.deny_subscribe))
        except ValueError as exc:
            raise InputError(f"bad subject pattern: {exc}") from None
    if args.anonymous:
        users.anonymous = name
    try:
        UsersFile.from_json(users.to_json(), "the new users file")  # what the gateways will read must load
    except UsersFileError as exc:
        raise InputError(str(exc)) from None
    return token


def _rights_given(args: argparse.Namespace) -> bool:
    return bool(args.publish or args.subscribe or args.deny_publish or args.deny_subscribe)


def _password(args: argparse.Namespace, name: str) -> str:
    if args.password_stdin:
        line = sys.stdin.readline()
        if not line.rstrip("\r\n"):
            raise InputError("no password on stdin")
        return line.rstrip("\r\n")
    if not sys.stdin.isatty():
        raise InputError("no terminal to ask for the password: use --password-stdin (or --no-password, --token)")
    first = getpass.getpass(f"password for {name}: ")
    if not first:
        raise InputError("an empty password")
    if getpass.getpass("again: ") != first:
        raise InputError("the passwords differ")
    return first


def _credentials(users: UsersFile, entry: Entry) -> str:
    kinds = []
    if entry.password is not None:
        kinds.append("password")
    if entry.tokens:
        kinds.append(f"{len(entry.tokens)} token{'s' if len(entry.tokens) > 1 else ''}")
    if users.anonymous == entry.user.name:
        kinds.append("anonymous")
    return ",".join(kinds) or "certificate only"


def _rights(user: User) -> str:
    parts = []
    for direction in ("publish", "subscribe"):
        rights: Permissions = getattr(user, direction)
        allowed = "everything" if rights.allow is None else (" ".join(rights.allow) or "nothing")
        denied = f" but not {' '.join(rights.deny)}" if rights.deny else ""
        parts.append(f"{direction} {allowed}{denied}")
    return "; ".join(parts)
