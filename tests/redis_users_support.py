"""Helpers for the Redis gateway's users tests: a users file built from plain rights, and a pure client driver.

Not a test module of its own (it holds no tests).
"""
from __future__ import annotations

import functools
from collections import Counter
from pathlib import Path

from fyrehose.gateways.access.login import Access, Login
from fyrehose.gateways.access.permissions import Permissions
from fyrehose.gateways.access.secrets import hash_secret
from fyrehose.gateways.access.users import Entry, User, UsersFile
from fyrehose.gateways.redis.connection import RedisConnection, RedisRoutes
from fyrehose.gateways.requests import Publish, Snapshot, Verify
from fyrehose.subjects.envelope import Envelope, decode

from gateway_support import Deployment


@functools.cache
def hashed(password: str) -> str:
    """scrypt costs tens of ms: each test password is hashed once per test process."""
    return hash_secret(password)


def rights(rules: dict | None) -> Permissions:
    rules = rules or {}
    return Permissions.of(rules.get("allow"), rules.get("deny", ()))


def users(spec: dict[str, dict], anonymous: str | None = None) -> UsersFile:
    """``{"alice": {"password": "secret", "publish": {"allow": [...]}, "subscribe": {...}}, ...}``."""
    entries = {name: Entry(User(name, rights(fields.get("publish")), rights(fields.get("subscribe"))),
                           hashed(fields["password"]) if "password" in fields else None)
               for name, fields in spec.items()}
    return UsersFile(entries, anonymous)


def write_users(path: Path, spec: dict[str, dict], anonymous: str | None = None) -> Path:
    path.write_bytes(users(spec, anonymous).to_json())
    return path



class Client:
    """A pure RedisConnection with a login, fed bytes; its requests answered as the gateway's driver would."""

    def __init__(self, access: Access, routes: RedisRoutes | None = None, address: str = "10.0.0.1",
                 certificate: str | None = None) -> None:
        self.access = access
        self.login = Login(access, address)
        if certificate is not None:
            self.login.certificate(certificate)
        self.routes = routes if routes is not None else RedisRoutes()
        self.deployment = Deployment()
        self.warnings: list[str] = []
        self.connection = RedisConnection(self.routes, self.deployment, Counter(), login=self.login,
                                          warn=self.warnings.append)
        self.published: list[Envelope] = []
        self.verifies: list[Verify] = []
        self.now = 0.0

    def send(self, data: bytes, verify: bool = True) -> bytes:
        """Feed ``data``; carry out the requests (a Verify at once unless ``verify`` is False); what was written."""
        self.connection.receive(data, self.now)
        return self.settle(verify)

    def settle(self, verify: bool = True) -> bytes:
        out = b""
        while True:
            out += self.connection.outbox.take()
            requests, self.connection.requests[:] = list(self.connection.requests), []
            if not requests:
                return out
            for request in requests:
                if isinstance(request, Publish):
                    self.published.extend(decode(payload) for payload in request.payloads)
                    self.connection.published(request.token, list(range(len(request.payloads))))
                elif isinstance(request, Snapshot):
                    self.connection.answered(request.token, None)
                elif verify:
                    self.connection.verified(request.token, request.users.verify(request.credential))
                else:
                    self.verifies.append(request)
            if not verify and self.verifies:
                return out + self.connection.outbox.take()


def command(*args: bytes) -> bytes:
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(arg), arg) for arg in args)
