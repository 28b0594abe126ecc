"""The systems ``fyrehose bench`` can measure, by the names its ``--targets`` option takes."""
from __future__ import annotations

from dataclasses import dataclass

from fyrehose.errors import CommandFailed

FYREHOSE = "fyrehose"
REDIS = "redis"
NATS = "nats"


class BenchError(CommandFailed):
    """A run cannot go on: a server would not start or install, a load generator failed."""


@dataclass(frozen=True)
class Target:
    name: str
    protocol: str  # FYREHOSE, REDIS or NATS: which server and which load generators
    multiprocess: bool = False  # fyrehose only: --workers R (--fanout F) instead of --workers 0
    batch: bool = True  # fyrehose only: subscribers set the BATCH flag (several DELIVERs per datagram)
    gateway: str | None = None  # redis/nats: served by ``fyrehose gateway KIND`` on a backbone, not the server
    gateway_workers: int = 1  # processes of that gateway (--workers)


TARGETS = {
    target.name: target
    for target in (
        Target("fyrehose", FYREHOSE, multiprocess=True),
        Target("fyrehose-single", FYREHOSE),
        Target("fyrehose-nobatch", FYREHOSE, multiprocess=True, batch=False),
        Target("fyrehose-single-nobatch", FYREHOSE, batch=False),
        Target("redis", REDIS),
        Target("nats", NATS),
        Target("redis-gateway", REDIS, gateway="redis"),
        Target("nats-gateway", NATS, gateway="nats"),
        Target("redis-gateway-2", REDIS, gateway="redis", gateway_workers=2),
        Target("nats-gateway-2", NATS, gateway="nats", gateway_workers=2),
    )
}
DEFAULT_TARGETS = "fyrehose,fyrehose-single,redis,nats"

# (target, baseline): ratios reported when both ran, each from rounds measured side by side
RATIOS = (("fyrehose", "fyrehose-single"), ("fyrehose-nobatch", "fyrehose-single-nobatch"),
          ("redis-gateway", "redis"), ("nats-gateway", "nats"),
          ("redis-gateway-2", "redis"), ("nats-gateway-2", "nats"))


def parse_targets(text: str) -> list[Target]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        raise ValueError("no targets given")
    unknown = [name for name in names if name not in TARGETS]
    if unknown:
        raise ValueError(f"unknown target {unknown[0]!r} (choose from {', '.join(TARGETS)})")
    if len(set(names)) != len(names):
        raise ValueError("a target is named twice")
    return [TARGETS[name] for name in names]
