"""The gateways' users file: who may connect, with which secret, and what each may publish and subscribe to.

One JSON document, written by ``fyrehose users`` (docs/security.md, "Who may
connect, publish and subscribe")::

    {"fyrehose_users": 1,
     "anonymous": "guest",
     "users": {
       "alice": {"password": "scrypt$16384$8$1$...$...",
                 "tokens": {"5f0c...": "scrypt$..."},
                 "publish": {"allow": ["orders.>"], "deny": ["orders.audit"]},
                 "subscribe": {"allow": [">"]}},
       "guest": {"subscribe": {"allow": ["public.>"]}, "publish": {"allow": []}}}}

Secrets are scrypt hashes only (:mod:`fyrehose.gateways.access.secrets`).
``anonymous`` names the user whose rights a client that sends no credentials
gets; without it such a client gets nothing.  A user named ``default`` is
the one Redis's one-argument ``AUTH password`` logs in as, as in Redis.  A
client certificate whose subject common name is a user's name logs in as
that user (the gateway's ``--tls-ca`` vouches for it).  A missing ``allow``
list permits every subject not denied; an empty one permits none.

This file is not the HMAC users database of ``fyrehose auth`` (docs/security.md):
that one holds the keys the deployment's own nodes sign the stream with; this
one, the people and programs that connect to a gateway.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from fyrehose.errors import InputError
from fyrehose.gateways.access.permissions import EVERYTHING, Permissions
from fyrehose.gateways.access.secrets import (
    SecretError,
    VerifiedSecrets,
    check_secret,
    parse_stored,
    split_token,
)
from fyrehose.subjects.envelope import EnvelopeError

FORMAT = 1
USER_NAME = re.compile(r"[A-Za-z0-9_.@+-]{1,64}")
REDIS_DEFAULT_USER = "default"
MAX_TOKENS = 64  # per user


class UsersFileError(InputError):
    """A users file that cannot be used; the message is one line that names the file and the problem."""


@dataclass(frozen=True)
class User:
    """A user's name and rights (never its secrets)."""

    name: str
    publish: Permissions = EVERYTHING
    subscribe: Permissions = EVERYTHING


@dataclass
class Entry:
    """A user as the file holds it."""

    user: User
    password: str | None = None  # stored scrypt hash
    tokens: dict[str, str] = field(default_factory=dict)  # token id -> stored scrypt hash of its secret


def check_user_name(name: str) -> str:
    if not USER_NAME.fullmatch(name):
        raise UsersFileError(f"bad user name {name!r}: 1-64 of letters, digits and _.@+-")
    return name


@dataclass(frozen=True)
class Password:
    """A user name (None: Redis's one-argument AUTH, the ``default`` user) and a password."""

    user: str | None
    password: str


@dataclass(frozen=True)
class Token:
    """A bearer token (NATS ``auth_token``, HTTP ``Authorization: Bearer``)."""

    token: str


Credential = Password | Token


class UsersFile:
    """The users, parsed and checked; :meth:`verify` is the slow, constant-time check of one credential."""

    def __init__(self, entries: dict[str, Entry] | None = None, anonymous: str | None = None) -> None:
        self.entries: dict[str, Entry] = dict(entries or {})
        self.anonymous = anonymous
        self._token_owners = {token_id: name for name, entry in self.entries.items() for token_id in entry.tokens}
        self._verified = VerifiedSecrets()  # new with every load: a changed password is never remembered

    # ------------------------------------------------------------ lookups (fast, on the gateway's loop)

    def user(self, name: str) -> User | None:
        entry = self.entries.get(name)
        return entry.user if entry is not None else None

    def anonymous_user(self) -> User | None:
        """The rights of a client that sent no credentials, or None when such a client gets nothing."""
        return self.user(self.anonymous) if self.anonymous is not None else None

    def remembered(self, credential: Credential) -> User | None:
        """The user, when this exact credential was verified before in this process (no hashing)."""
        name, key, stored, secret = self._lookup(credential)
        if name is None or not self._verified.known(key, secret):
            return None
        return self.user(name)

    # ------------------------------------------------------------ verification (slow: off the loop)

    def verify(self, credential: Credential) -> User | None:
        """The user the credential proves, or None; as long for an unknown user as for a wrong secret."""
        name, key, stored, secret = self._lookup(credential)
        if not check_secret(stored, secret) or name is None:
            return None
        self._verified.remember(key, secret)
        return self.user(name)

    def _lookup(self, credential: Credential) -> tuple[str | None, str, str | None, str]:
        """(the user it names, a key for the remembered secrets, the stored hash, the secret); no user: None, None."""
        if isinstance(credential, Password):
            name = REDIS_DEFAULT_USER if credential.user is None else credential.user
            entry = self.entries.get(name)
            if entry is None or entry.password is None:
                return None, "", None, credential.password
            return name, f"password:{name}", entry.password, credential.password
        parts = split_token(credential.token)
        if parts is None:
            return None, "", None, credential.token
        token_id, secret = parts
        owner = self._token_owners.get(token_id)
        if owner is None:
            return None, "", None, secret
        return owner, f"token:{token_id}", self.entries[owner].tokens[token_id], secret

    # ------------------------------------------------------------ the file

    @classmethod
    def from_json(cls, data: bytes, where: str = "users file") -> UsersFile:
        try:
            document = json.loads(data)
        except (ValueError, UnicodeDecodeError) as exc:
            raise UsersFileError(f"{where}: not JSON ({exc})") from None
        if not isinstance(document, dict) or document.get("fyrehose_users") != FORMAT:
            raise UsersFileError(f"{where}: not a fyrehose users file (no \"fyrehose_users\": {FORMAT})")
        users = document.get("users", {})
        if not isinstance(users, dict):
            raise UsersFileError(f"{where}: \"users\" is not an object")
        entries = {}
        for name, fields in users.items():
            try:
                entries[check_user_name(name)] = _entry(name, fields)
            except (UsersFileError, SecretError, EnvelopeError, TypeError, ValueError) as exc:
                raise UsersFileError(f"{where}: user {name!r}: {exc}") from None
        anonymous = document.get("anonymous")
        if anonymous is not None and (not isinstance(anonymous, str) or anonymous not in entries):
            raise UsersFileError(f"{where}: \"anonymous\" names no user of the file: {anonymous!r}")
        return cls(entries, anonymous)

    def to_json(self) -> bytes:
        users = {}
        for name, entry in sorted(self.entries.items()):
            fields: dict[str, object] = {}
            if entry.password is not None:
                fields["password"] = entry.password
            if entry.tokens:
                fields["tokens"] = dict(sorted(entry.tokens.items()))
            for direction in ("publish", "subscribe"):
                rights: Permissions = getattr(entry.user, direction)
                rules: dict[str, list[str]] = {}
                if rights.allow is not None:
                    rules["allow"] = list(rights.allow)
                if rights.deny:
                    rules["deny"] = list(rights.deny)
                if rules:
                    fields[direction] = rules
            users[name] = fields
        document: dict[str, object] = {"fyrehose_users": FORMAT}
        if self.anonymous is not None:
            document["anonymous"] = self.anonymous
        document["users"] = users
        return json.dumps(document, indent=2).encode() + b"\n"


def _entry(name: str, fields: object) -> Entry:
    if not isinstance(fields, dict):
        raise UsersFileError("not an object")
    unknown = set(fields) - {"password", "tokens", "publish", "subscribe"}
    if unknown:
        raise UsersFileError(f"unknown field {sorted(unknown)[0]!r}")
    password = fields.get("password")
    if password is not None:
        if not isinstance(password, str):
            raise UsersFileError("\"password\" is not a string")
        parse_stored(password)
    tokens = fields.get("tokens", {})
    if not isinstance(tokens, dict) or len(tokens) > MAX_TOKENS:
        raise UsersFileError(f"\"tokens\" is not an object of at most {MAX_TOKENS} token ids")
    for token_id, stored in tokens.items():
        if not isinstance(stored, str) or split_token(f"fh_{token_id}_x") is None:
            raise UsersFileError(f"bad token entry {token_id!r}")
        parse_stored(stored)
    return Entry(User(name, _rights(fields.get("publish")), _rights(fields.get("subscribe"))), password, dict(tokens))


def _rights(rules: object) -> Permissions:
    if rules is None:
        return EVERYTHING
    if not isinstance(rules, dict) or set(rules) - {"allow", "deny"}:
        raise UsersFileError("rights are {\"allow\": [PATTERN, ...], \"deny\": [PATTERN, ...]}")
    allow, deny = rules.get("allow"), rules.get("deny", [])
    for patterns in (allow, deny):
        if patterns is not None and (not isinstance(patterns, list)
                                     or not all(isinstance(pattern, str) for pattern in patterns)):
            raise UsersFileError("\"allow\" and \"deny\" are lists of subject patterns")
    return Permissions.of(allow, deny)
