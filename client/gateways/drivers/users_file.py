"""A gateway's ``--users`` file on disk: loaded at start, re-read on SIGHUP without dropping a connection.

A file that cannot be read or used at start stops the gateway with one line
naming the problem; at a re-read it leaves the users as they were and logs
one line why (as nginx and nats-server treat a bad reload).
"""
from __future__ import annotations

import logging
import signal
from collections import Counter
from pathlib import Path

import gevent

from fyrehose.gateways.access.login import Access
from fyrehose.gateways.access.users import UsersFile, UsersFileError

log = logging.getLogger("fyrehose.gateway")

NO_USERS = "no --users: every client may publish and subscribe to everything"


def load_users(path: str | Path) -> UsersFile:
    """The users file at ``path``; UsersFileError (one line) when it cannot be read or used."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise UsersFileError(f"cannot read users file {path}: {exc.strerror or exc}") from None
    return UsersFile.from_json(data, str(path))


def access_from(path: str | None, stats: Counter) -> Access:
    """The gateway's :class:`Access`: its users from ``path`` (re-read on SIGHUP), or everyone's without one."""
    if path is None:
        return Access(None, stats)
    access = Access(load_users(path), stats)
    gevent.signal_handler(signal.SIGHUP, reload, access, path)
    return access


def announce(access: Access, path: str | None) -> None:
    """One line on who may connect, once the gateway serves (a gateway that fails to start says only why)."""
    users = access.users
    if users is None:
        log.info(NO_USERS)
    else:
        log.info("users from %s: %d users, clients without credentials %s; SIGHUP re-reads it", path,
                 len(users.entries), f"are {users.anonymous}" if users.anonymous else "get nothing")


def reload(access: Access, path: str | Path) -> bool:
    """Re-read the file into ``access``; a bad file keeps the users as they were. Whether it took."""
    try:
        users = load_users(path)
    except UsersFileError as exc:
        access.stats["users file reload failures"] += 1
        log.error("users file not re-read, the previous users stay: %s", exc)
        return False
    access.replace(users)
    access.stats["users file reloads"] += 1
    log.info("users re-read from %s: %d users", path, len(users.entries))
    return True
