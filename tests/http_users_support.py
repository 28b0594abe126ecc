"""Users files for the HTTP, Marlin and Lumberjack gateways' tests: alice (a password and a token), her rights."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fyrehose.gateways.access.permissions import Permissions
from fyrehose.gateways.access.secrets import hash_secret, new_token
from fyrehose.gateways.access.users import Entry, User, UsersFile

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
    """A CA, a server certificate for 127.0.0.1 and a client certificate per name (its subject's CN), by openssl."""
    import subprocess

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=directory, check=True, capture_output=True, timeout=60)

    key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    openssl("req", "-x509", *key, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=test CA")
    (directory / "server.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    for name in ("server", *clients):
        openssl("req", *key, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}")
        extension = ["-extfile", "server.ext"] if name == "server" else []
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
                "-out", f"{name}.pem", "-days", "2", *extension)
    return {file.name: str(file) for file in directory.iterdir() if file.suffix in (".pem", ".key")}
