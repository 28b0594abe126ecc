"""The limits and policies of one HTTP gateway, from its command line."""
from __future__ import annotations

from dataclasses import dataclass

from fyrehose.subjects.auth import Credentials

DEFAULT_MAX_MESSAGE = 1 << 20
DEFAULT_MAX_HEAD = 16 << 10  # request line and headers together
DEFAULT_IDLE_TIMEOUT = 30.0


@dataclass
class HttpSettings:
    backbone: str
    max_message: int = DEFAULT_MAX_MESSAGE
    max_head: int = DEFAULT_MAX_HEAD
    allow_origins: tuple[str, ...] = ()  # besides the page's own origin; "*" allows any
    request_timeout: float = 1.0
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT  # for each whole request, and between requests
    tls: bool = False
    credentials: Credentials | None = None
    backfill_limit: int = 100_000  # messages a reconnecting SSE client may ask for
    backfill_timeout: float = 10.0
