"""Modules that moved, importable from their old names with a DeprecationWarning that names the new one.

The package's modules once sat in one folder (``fyrehose.tracker``,
``fyrehose.envelope``, ``fyrehose.auth``, ...); they now live in the folder of
their layer (docs/architecture.md).  A script written against the old names
keeps working: :class:`MovedFinder`, put on ``sys.meta_path`` by the
package's ``__init__``, answers an old name with the module under its new
name (the same module object, so classes and isinstance checks agree) and
warns once per old name.  What a script needs is importable from
``fyrehose`` itself (``from fyrehose import Client, Envelope, MsgType``): that
is the path that will not move.
"""
from __future__ import annotations

import importlib
import sys
import warnings
from importlib.machinery import ModuleSpec
from types import ModuleType

# old name -> new name (modules of the single-folder layout, before the layers had folders)
MOVED = {
    "fyrehose.admission": "fyrehose.protocol.admission",
    "fyrehose.codec": "fyrehose.protocol.codec",
    "fyrehose.connection": "fyrehose.protocol.connection",
    "fyrehose.forwarding": "fyrehose.protocol.forwarding",
    "fyrehose.frame_run": "fyrehose.protocol.frame_run",
    "fyrehose.multicast": "fyrehose.protocol.multicast",
    "fyrehose.pacing": "fyrehose.protocol.pacing",
    "fyrehose.publishing": "fyrehose.protocol.publishing",
    "fyrehose.recent_messages": "fyrehose.protocol.recent_messages",
    "fyrehose.memjournal": "fyrehose.protocol.recent_messages",
    "fyrehose.tracker": "fyrehose.protocol.tracker",
    "fyrehose.auth": "fyrehose.subjects.auth",
    "fyrehose.envelope": "fyrehose.subjects.envelope",
    "fyrehose.interest": "fyrehose.subjects.interest",
    "fyrehose.subject_session": "fyrehose.subjects.session",
    "fyrehose.sessions": "fyrehose.subjects.session_table",
    "fyrehose.snapshots": "fyrehose.subjects.snapshots",
    "fyrehose.subject_stream": "fyrehose.subjects.subscription_events",
    "fyrehose.client": "fyrehose.drivers.client",
    "fyrehose.routing": "fyrehose.drivers.routing",
    "fyrehose.subscription": "fyrehose.drivers.subscription",
    "fyrehose.addresses": "fyrehose.net.addresses",
    "fyrehose.group_socket": "fyrehose.net.group_socket",
    "fyrehose.sockets": "fyrehose.net.sockets",
    "fyrehose.argtypes": "fyrehose.runtime.argtypes",
    "fyrehose.auth_options": "fyrehose.runtime.credentials",
    "fyrehose.durable": "fyrehose.runtime.durable",
    "fyrehose.fatal": "fyrehose.runtime.fatal",
    "fyrehose.machine_cpu": "fyrehose.runtime.machine_cpu",
    "fyrehose.process": "fyrehose.runtime.process",
    "fyrehose.readiness": "fyrehose.runtime.readiness",
    "fyrehose.cli": "fyrehose.commands.main",
    "fyrehose.gateways.link": "fyrehose.drivers.link",
    "fyrehose.gateways.hub": "fyrehose.gateways.drivers.router",
    "fyrehose.gateways.bridge": "fyrehose.gateways.drivers.router",
    "fyrehose.gateways.streamparser": "fyrehose.gateways.incremental",
    "fyrehose.gateways.redis_glob": "fyrehose.subjects.redis_glob",
    "fyrehose.gateways.resp": "fyrehose.gateways.redis.protocol",
    "fyrehose.gateways.nats_protocol": "fyrehose.gateways.nats.protocol",
    "fyrehose.gateways.marlin_protocol": "fyrehose.gateways.marlin.protocol",
}


class _Alias:
    """The loader of an old name: the module of the new name, with the warning."""

    def __init__(self, old: str, new: str) -> None:
        self.old, self.new = old, new

    def create_module(self, spec: ModuleSpec) -> ModuleType:
        warnings.warn(f"{self.old} moved to {self.new}; import it from there (or what a script needs from "
                      f"fyrehose itself)", DeprecationWarning, stacklevel=2)
        return importlib.import_module(self.new)

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the module ran under its new name."""


class MovedFinder:
    """Finds only the old names of :data:`MOVED` (one dictionary lookup for every other import)."""

    def find_spec(self, name: str, path: object = None, target: object = None) -> ModuleSpec | None:
        new = MOVED.get(name)
        if new is None:
            return None
        return ModuleSpec(name, _Alias(name, new))  # type: ignore[arg-type]  # a loader by shape


def install() -> None:
    """Put the finder on ``sys.meta_path`` once (after the package's own finders)."""
    if not any(isinstance(finder, MovedFinder) for finder in sys.meta_path):
        sys.meta_path.append(MovedFinder())
