"""Helpers for the authentication tests: a users database, an attacker on the network, what a listener saw.

Not a test module of its own; test_auth_client.py and test_gateway_auth.py import from it.
"""
from __future__ import annotations

import socket

from fyrehose.protocol import codec
from fyrehose.subjects.auth import AuthDatabase, Authenticator, Credentials
from fyrehose.subjects.envelope import Envelope, decode, encode
from fyrehose.subjects.session_table import LocalSession

from support import take_until

SERVICE = "quotes"


def users(*names: str) -> AuthDatabase:
    db = AuthDatabase()
    for name in names:
        db.add(name, SERVICE, f"secret of {name}")
    return db


class Attacker:
    """Anyone on the network: PUSHes whatever bytes it likes straight to the backbone."""

    def __init__(self, backbone) -> None:
        self.backbone = backbone.addr
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)

    def push(self, payload: bytes) -> None:
        self.sock.sendto(codec.encode_push(payload), self.backbone)

    def forge(self, session_name: str, envelope: Envelope) -> bytes:
        """Sign as ``session_name`` with a guessed password."""
        user = session_name.split(".")[0]
        guessed = AuthDatabase()
        guessed.add(user, SERVICE, "guess")
        session = LocalSession(user, name=session_name)
        return encode(Authenticator(Credentials(guessed, user, SERVICE), session).sign(session.stamp(envelope)))

    def close(self) -> None:
        self.sock.close()


def genuine_bytes(raw_stream, data: bytes) -> bytes:
    """The payload of the enveloped message carrying ``data``, as anyone listening saw it."""
    return take_until(raw_stream, lambda m: (e := decode(m.data)) is not None and e.data == data).data
