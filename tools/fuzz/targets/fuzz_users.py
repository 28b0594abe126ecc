"""Fuzz target: the gateways' users file loads or is refused with UsersFileError, and what loads writes back as read."""
from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import instrumented, main  # noqa: E402

with instrumented():
    from fyrehose.gateways.access.secrets import hash_secret
    from fyrehose.gateways.access.users import UsersFile, UsersFileError

_HASH = hash_secret("seed")
SEEDS = [
    json.dumps({"fyrehose_users": 1, "anonymous": "guest", "users": {
        "alice": {"password": _HASH, "publish": {"allow": ["orders.>"], "deny": ["orders.audit"]}},
        "bot": {"tokens": {"0123456789abcdef": _HASH}},
        "guest": {"subscribe": {"allow": ["public.*"]}, "publish": {"allow": []}}}}).encode(),
    b'{"fyrehose_users": 1, "users": {}}',
]


def check(data: bytes) -> None:
    try:
        users = UsersFile.from_json(data, "fuzz")
    except UsersFileError:
        return
    written = users.to_json()
    assert UsersFile.from_json(written).to_json() == written


if __name__ == "__main__":
    main(check, SEEDS)
