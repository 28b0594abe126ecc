"""The settings of one load test, defined once for both sides of the process boundary.

``fyrehose loadtest`` parses them as ``--rate`` etc., validates them and hands
them to the Locust processes as ``--fyrehose-rate`` etc., which the locustfile
declares through Locust's ``init_command_line_parser`` event.  (The prefix
keeps them apart from Locust's own options.)
"""
from __future__ import annotations

import argparse
import math
from dataclasses import dataclass, field, fields
from typing import Any

from fyrehose.errors import InputError
from fyrehose.loadtest.rates import SHAPES, RateSchedule, build_schedule
from fyrehose.loadtest.stamp import MIN_SIZE
from fyrehose.net.addresses import parse_hostport
from fyrehose.protocol.codec import FRAME_HEADER, MAX_DATAGRAM, MAX_PAYLOAD
from fyrehose.protocol.publishing import MAX_PUBLISH_TIMEOUT
from fyrehose.runtime.argtypes import duration as duration_type

PREFIX = "fyrehose-"


def _option(default, kind, help_text: str, metavar: str | None = None, choices=None):
    return field(default=default, metadata={"type": kind, "help": help_text, "metavar": metavar, "choices": choices})


@dataclass(frozen=True)
class LoadSettings:
    backbone: str = _option("127.0.0.1:2323", str, "the backbone to load", "HOST:PORT")
    users: int = _option(4, int, "publishing users, each with one CONFIRMed PUSH in flight (default 4)", "N")
    subscribers: int = _option(2, int, "subscribing users; two or more recover each other's gaps (default 2)", "N")
    batch: int = _option(0, int, "messages per publish request, packed into tagged PUSH datagrams of the Locust "
                                 "process's one confirmed publisher and CONFIRMed together (default 0: one message per "
                                 "request)", "N")
    rate: float = _option(200.0, float, "offered msgs/s; the step shape adds this much per step (default 200)", "R")
    duration: float = _option(30.0, duration_type, "how long to publish: seconds, or like 15s, 1m30s, 1h (default 30)", "T")
    shape: str = _option("constant", str, "load shape (default constant)", None, SHAPES)
    step_time: float = _option(10.0, duration_type, "seconds per step of the step shape (default 10)", "S")
    spike_factor: float = _option(5.0, float, "rate multiplier of the spike shape's spike (default 5)", "X")
    p99_ms: float = _option(50.0, float, "publish-to-confirm p99 above which a phase is not sustained (default 50)", "MS")
    size: int = _option(64, int, f"payload bytes, {MIN_SIZE} to {MAX_PAYLOAD} (default 64)", "BYTES")
    timeout: float = _option(2.0, duration_type, "seconds to wait for a CONFIRM, retries included, before a publish "
                                         "counts as failed (default 2)", "S")
    drain: float = _option(3.0, duration_type, "seconds subscribers keep recovering gaps after publishing ends; "
                                       "what is still missing then is lost (default 3)", "S")
    out: str = _option("", str, "directory for summary.json and steps.jsonl (default: none)", "DIR")
    workers: int = _option(0, int, "Locust worker processes (recorded in the summary)", "K")

    def validate(self) -> None:
        """Raise ValueError, in one line, for any setting that cannot work."""
        parse_hostport(self.backbone)
        for name in ("users", "subscribers"):
            if getattr(self, name) < 1:
                raise InputError(f"--{name} must be at least 1")
        for name in ("rate", "duration", "step_time", "spike_factor", "p99_ms"):
            if not 0 < getattr(self, name) < math.inf:
                raise InputError(f"--{name.replace('_', '-')} must be a positive number")
        if not MIN_SIZE <= self.size <= MAX_PAYLOAD:
            raise InputError(f"--size must be between {MIN_SIZE} and {MAX_PAYLOAD} bytes")
        if not 0 < self.timeout <= MAX_PUBLISH_TIMEOUT:
            raise InputError(f"--timeout must be in (0, {MAX_PUBLISH_TIMEOUT:g}] seconds")
        if not 0 <= self.drain < math.inf:
            raise InputError("--drain must be 0 or more seconds")
        if self.batch < 0:
            raise InputError("--batch must be 0 (one message per request) or more")
        if self.batch * (self.size + FRAME_HEADER) > 64 * MAX_DATAGRAM:
            raise InputError(f"--batch {self.batch} of {self.size}-byte messages would take more than 64 datagrams "
                             "per request")
        if self.workers < 0:
            raise InputError("--workers must be 0 or more")
        if self.shape not in SHAPES:
            raise InputError(f"--shape must be one of {', '.join(SHAPES)}")

    def schedule(self) -> RateSchedule:
        return build_schedule(self.shape, self.rate, self.duration, self.step_time, self.spike_factor)

    def to_locust_argv(self) -> list[str]:
        argv = []
        for item in fields(self):
            argv += [f"--{PREFIX}{item.name.replace('_', '-')}", str(getattr(self, item.name))]
        return argv

    @classmethod
    def from_namespace(cls, namespace: argparse.Namespace, prefix: str = "") -> LoadSettings:
        """Settings from parsed options named ``prefix + field`` (Locust's) or ``field`` (the CLI's)."""
        return cls(**{item.name: getattr(namespace, prefix + item.name) for item in fields(cls)})


def add_setting_arguments(parser: argparse.ArgumentParser, prefix: str = "", skip: tuple[str, ...] = (),
                          **extra: Any) -> None:
    """Declare every setting as ``--[prefix]name``; ``extra`` goes to each add_argument (Locust's UI flags)."""
    for item in fields(LoadSettings):
        if item.name in skip:
            continue
        meta = item.metadata
        parser.add_argument(
            f"--{prefix}{item.name.replace('_', '-')}", type=meta["type"], default=item.default,
            help=meta["help"], metavar=meta["metavar"], choices=meta["choices"], **extra,
        )
