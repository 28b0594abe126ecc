"""Users files for the HTTP, Marlin and Lumberjack gateways' tests: alice (a password and a token), her rights."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fyrehose.gateways.access.permissions import Permissions
from fyrehose.gateways.access.secrets import hash_secret, new_token
from fyrehose.gateways.access.users import Entry, User, UsersFile

from support import make_certificates

PASSWORD = "s3cret pass"


@dataclass
class Users:
    file: UsersFile
    token: str  # alice's
    path: Path | None = None


def users(*, anonymous: bool = False, path: Path | None = None) -> Users:
    """alice: publishes under ``prices.>`` but not ``prices.secret``, subscribes to ``prices.>`` and ``news.*``;
    bob: a password, no rights beyond ``bob.>``; with ``anonymous``, clients without credentials read ``public.>``.
    """
    token, token_id, stored = new_token()
    entries = {
        "alice": Entry(User("alice", Permissions.of(["prices.>"], ["prices.secret"]),
                            Permissions.of(["prices.>", "news.*"], ["prices.secret"])),
                       password=hash_secret(PASSWORD), tokens={token_id: stored}),
        "bob": Entry(User("bob", Permissions.of(["bob.>"]), Permissions.of(["bob.>"])), password=hash_secret(PASSWORD)),
    }
    if anonymous:
        entries["guest"] = Entry(User("guest", Permissions.of([]), Permissions.of(["public.>"])))
    file = UsersFile(entries, anonymous="guest" if anonymous else None)
    if path is not None:
        path.write_bytes(file.to_json())
    return Users(file, token, path)


def certificates(directory: Path, clients: tuple[str, ...] = ("alice", "mallory")) -> dict[str, str]:
    """A CA, a server certificate for 127.0.0.1 and a client certificate per name (its subject's CN)."""
    return make_certificates(directory, clients)
