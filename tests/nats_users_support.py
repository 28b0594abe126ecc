"""A users file for the NATS gateway's tests, and the same users as a nats-server authorization block.

Not a test module of its own (it holds no tests); the NATS test modules import from it.
"""
from __future__ import annotations

import json
from pathlib import Path

from fyrehose.gateways.access.permissions import Permissions
from fyrehose.gateways.access.secrets import hash_secret, new_token
from fyrehose.gateways.access.users import Entry, User, UsersFile

# name -> (password, publish (allow, deny), subscribe (allow, deny)); allow None: everything not denied
RIGHTS = {
    "alice": ("secret", (["orders.>", "svc.>"], ["orders.audit"]), (["orders.>", "_INBOX.>"], ["orders.secret.>"])),
    "bob": ("hunter2", (None, []), (None, [])),
    "svc": ("svcpw", (["svc.status"], []), (["svc.>"], [])),
}


def users_file(anonymous: str | None = None, rights: dict | None = None) -> tuple[UsersFile, dict[str, str]]:
    """The users of ``rights`` (default :data:`RIGHTS`), each with its password and one token: (file, tokens)."""
    entries, tokens = {}, {}
    for name, (password, (pub_allow, pub_deny), (sub_allow, sub_deny)) in (rights or RIGHTS).items():
        token, token_id, stored = new_token()
        tokens[name] = token
        user = User(name, Permissions.of(pub_allow, pub_deny), Permissions.of(sub_allow, sub_deny))
        entries[name] = Entry(user, hash_secret(password), {token_id: stored})
    return UsersFile(entries, anonymous), tokens


def write_users(path: Path, anonymous: str | None = None, rights: dict | None = None) -> dict[str, str]:
    """Write the users file to ``path``; the tokens by user."""
    users, tokens = users_file(anonymous, rights)
    path.write_bytes(users.to_json())
    return tokens


def nats_server_authorization(anonymous: str | None = None, rights: dict | None = None) -> str:
    """The same users, passwords and rights as nats-server configuration (tokens aside: nats-server has one)."""
    def rules(allow, deny) -> dict:
        block: dict = {}
        if allow is not None:
            block["allow"] = allow
        if deny:
            block["deny"] = deny
        return block

    users = []
    for name, (password, publish, subscribe) in (rights or RIGHTS).items():
        permissions = {key: rules(*value) for key, value in (("publish", publish), ("subscribe", subscribe))
                       if rules(*value)}
        user = {"user": name, "password": password}
        if permissions:
            user["permissions"] = permissions
        users.append(user)
    text = "authorization {\n  users = " + json.dumps(users) + "\n}\n"
    return text + (f"no_auth_user: {anonymous}\n" if anonymous else "")
