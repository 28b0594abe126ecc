"""Writes keepalived's scripts for a pair member where keepalived will run them, and checks that it will.

keepalived's ``enable_script_security`` silently disables a root script that a
non-root user could change: one owned by another user, or writable by its
group or by everyone, or lying under such a directory (sticky ones, like
/tmp, excepted).  A disabled health check would leave the address on a host
whose backbone is dead, so the scripts are checked by the same rule here, and
a problem is an error of the command, not a surprise in keepalived's log.
"""
from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from fyrehose.errors import CommandFailed
from fyrehose.tools.deploy.keepalived import KeepalivedHost, render_scripts


def write_scripts(member: KeepalivedHost) -> list[Path]:
    """Write ``member``'s scripts into its scripts directory (created if missing), mode 0755, each atomically."""
    directory = Path(member.scripts_dir)
    directory.mkdir(mode=0o755, parents=True, exist_ok=True)
    written = []
    for name, text in render_scripts(member).items():
        path = directory / name
        descriptor, temporary = tempfile.mkstemp(dir=directory, prefix=f".{name}.")
        try:
            with os.fdopen(descriptor, "w") as out:
                out.write(text)
            os.chmod(temporary, 0o755)
            os.replace(temporary, path)
        except BaseException:
            os.unlink(temporary)
            raise
        written.append(path)
    for path in written:
        problem = insecure(path)
        if problem is not None:
            raise CommandFailed(f"keepalived's enable_script_security would not run {path}: {problem}")
    return written


def insecure(path: Path) -> str | None:
    """Why keepalived would refuse to run ``path`` as root, or None: the rule of its ``check_script_secure``."""
    real = Path(os.path.realpath(path))
    for part in [*reversed(real.parents), real]:
        info = part.stat()
        if info.st_uid != 0:
            return f"{part} is owned by uid {info.st_uid}, not root"
        checked = stat.S_ISREG(info.st_mode) or (stat.S_ISDIR(info.st_mode) and not info.st_mode & stat.S_ISVTX)
        if checked and ((info.st_gid != 0 and info.st_mode & stat.S_IWGRP) or info.st_mode & stat.S_IWOTH):
            return f"{part} is writable by users other than root"
    return None
