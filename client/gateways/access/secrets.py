"""Passwords and tokens as slow salted hashes (scrypt), and their checks in constant time.

A stored secret is ``scrypt$N$r$p$SALT$HASH`` (salt and hash in unpadded
base64url).  scrypt is memory-hard and in the standard library (OpenSSL's);
Redis's SHA-256 can be tried billions of times a second on a GPU, this a few
hundred times a second per core.  Checking one costs about 20-90 ms of CPU
(the parameters below), which is why the gateways check a secret off their
loop (:class:`fyrehose.gateways.requests.Verify`), once per connection, and
remember a verified secret (:class:`VerifiedSecrets`) so that a client that
logs in again, or an HTTP client sending its token with every request, pays
a keyed BLAKE2 hash instead.

Tokens are made here: ``fh_<id>_<secret>``.  The id (public, random) finds the
entry; only the secret's scrypt hash is stored, so a token is checked against
one hash, not against every user's.
"""
from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import hmac
import secrets

SCHEME = "scrypt"
N, R, P = 1 << 14, 8, 1  # the interactive-login parameters of the scrypt paper: 16 MiB of memory per check
SALT_BYTES = 16
HASH_BYTES = 32
MAX_MEMORY = 64 << 20
MAX_SECRET = 1024  # bytes of a password or token a client may send; a longer one is refused without hashing
TOKEN_PREFIX = "fh_"
TOKEN_ID_BYTES = 8
TOKEN_SECRET_BYTES = 32
MAX_VERIFIED = 4096  # remembered (user, secret) pairs per gateway process


class SecretError(ValueError):
    """A stored secret that is not one of ours (the users file names it)."""


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.b64decode(text + "=" * (-len(text) % 4), altchars=b"-_", validate=True)


def _derive(secret: bytes, salt: bytes, n: int, r: int, p: int) -> bytes:
    return hashlib.scrypt(secret, salt=salt, n=n, r=r, p=p, dklen=HASH_BYTES, maxmem=MAX_MEMORY)


def hash_secret(secret: str) -> str:
    """The stored form of a password or token secret: a fresh salt, scrypt."""
    salt = secrets.token_bytes(SALT_BYTES)
    return f"{SCHEME}${N}${R}${P}${_b64(salt)}${_b64(_derive(secret.encode(), salt, N, R, P))}"


def parse_stored(stored: str) -> tuple[int, int, int, bytes, bytes]:
    """(n, r, p, salt, hash) of a stored secret; SecretError when it is not one."""
    parts = stored.split("$")
    if len(parts) != 6 or parts[0] != SCHEME:
        raise SecretError("not a scrypt hash (scrypt$N$r$p$salt$hash)")
    try:
        n, r, p = int(parts[1]), int(parts[2]), int(parts[3])
        salt, digest = _unb64(parts[4]), _unb64(parts[5])
    except (ValueError, binascii.Error):
        raise SecretError("a scrypt hash with a malformed number or base64 field") from None
    if n < 2 or n & (n - 1) or n > 1 << 20 or not 1 <= r <= 32 or not 1 <= p <= 16 or 128 * r * n > MAX_MEMORY:
        raise SecretError(f"scrypt parameters out of range (N={n}, r={r}, p={p})")
    if len(salt) < 8 or len(digest) != HASH_BYTES:
        raise SecretError("a scrypt hash with a short salt or a hash of the wrong size")
    return n, r, p, salt, digest


@functools.cache
def _decoy() -> str:
    """What an unknown user's or token's check is done against, so that it costs what a wrong password costs."""
    return hash_secret(secrets.token_urlsafe(16))


def check_secret(stored: str | None, secret: str) -> bool:
    """Whether ``secret`` is the one ``stored`` was made from; ``stored`` None (no such user) takes as long.

    The comparison is constant-time (hmac.compare_digest); a secret longer than
    MAX_SECRET is refused after the same work, never hashed as it is.
    """
    n, r, p, salt, digest = parse_stored(stored if stored is not None else _decoy())
    raw = secret.encode("utf-8", "surrogatepass")
    candidate = _derive(raw[:MAX_SECRET], salt, n, r, p)
    return hmac.compare_digest(candidate, digest) and stored is not None and len(raw) <= MAX_SECRET


def new_token() -> tuple[str, str, str]:
    """(token as handed to its holder, its id, the stored hash of its secret)."""
    token_id = secrets.token_hex(TOKEN_ID_BYTES)
    secret = secrets.token_urlsafe(TOKEN_SECRET_BYTES)
    return f"{TOKEN_PREFIX}{token_id}_{secret}", token_id, hash_secret(secret)


def split_token(token: str) -> tuple[str, str] | None:
    """(id, secret) of a token of ours, or None for anything else."""
    if not token.startswith(TOKEN_PREFIX):
        return None
    token_id, separator, secret = token[len(TOKEN_PREFIX):].partition("_")
    if not separator or len(token_id) != 2 * TOKEN_ID_BYTES or not secret:
        return None
    return token_id, secret


class VerifiedSecrets:
    """(who, secret) pairs checked already in this process, as keyed hashes (the key never leaves memory).

    A wrong secret is never remembered, so guessing always pays scrypt; a
    remembered one answers in a microsecond.  Bounded: full, it starts again.
    """

    def __init__(self) -> None:
        self._key = secrets.token_bytes(32)
        self._known: dict[str, bytes] = {}

    def _mac(self, who: str, secret: str) -> bytes:
        return hashlib.blake2b(secret.encode("utf-8", "surrogatepass"), key=self._key,
                               person=b"fyrehose-secret", salt=hashlib.blake2b(who.encode()).digest()[:16]).digest()

    def known(self, who: str, secret: str) -> bool:
        remembered = self._known.get(who)
        return remembered is not None and hmac.compare_digest(remembered, self._mac(who, secret))

    def remember(self, who: str, secret: str) -> None:
        if len(self._known) >= MAX_VERIFIED:
            self._known.clear()
        self._known[who] = self._mac(who, secret)
