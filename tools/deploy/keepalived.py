"""keepalived's configuration for one host of a hot standby backbone pair, and the three scripts it runs.

Two backbones on two hosts share one service address (the VIP) that keepalived
moves by VRRP.  Each host runs keepalived with the file :func:`render_config`
writes: one VRRP instance, ``state BACKUP`` and ``nopreempt`` on both hosts (a
host that comes back never takes the address from a healthy primary),
unicast adverts to the one peer (no multicast on the network), a health check
of the local backbone, and notify scripts that signal it: SIGUSR1 (promote)
when this host takes the address, SIGUSR2 (demote) when it leaves MASTER for
BACKUP or FAULT, or keepalived stops.

The backbone tells its health through files in its ``--state-dir``: ``pid``
(its pid) and ``role`` (``primary``, ``standby`` or ``fenced``), each replaced
atomically.  Healthy means the pid is alive, not stopped (``T`` in
``/proc/PID/status``) and the role is ``primary`` or ``standby``, and it is the
pid the check's previous look saw (its file ``seen`` in the scripts directory):
a backbone restarted between two looks with its state directory lost has
nothing that tells it it ran before, so one failed look moves the address.

Why scripts in files rather than commands inline in keepalived.conf:

- keepalived 2.2.7 runs a ``vrrp_script`` at whole-second intervals only
  (``interval 0.1`` is refused as "invalid number").  To look at the backbone
  every 0.1 s, each run of the check looks repeatedly for 0.9 s and exits at
  the first failure; keepalived starts the next run on the next second.  That
  is a small shell program, not a one-liner.
- What runs is then exactly the file, with no keepalived string processing in
  between (its quote removal, backslash escapes and ``$NAME`` substitution),
  ``sh -n`` and the tests can run the very same file, and
  ``enable_script_security`` checks the file itself (root-owned, writable by
  root only), not just ``/bin/sh``.
- Each script is ``/bin/sh`` with builtins (``read``, ``case``, ``kill``) and
  one ``sleep`` per look: no Python start per check or per notification.

This module is pure: it renders text.  :mod:`fyrehose.tools.deploy.files`
writes the scripts, ``fyrehose keepalived`` (:mod:`fyrehose.commands.keepalived`)
prints the configuration.
"""
from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Interface
from pathlib import PurePosixPath

from fyrehose.errors import InputError

CHECK, PROMOTE, DEMOTE = "check", "promote", "demote"  # the scripts' file names in the scripts directory
SEEN = "seen"  # the check's own record in the scripts directory: the backbone pid its last look saw
INSTANCE = "fyrehose"  # the vrrp_instance
HEALTH = "fyrehose_backbone"  # the vrrp_script
LOOK_EVERY = 0.1  # seconds between two looks of the check at the backbone
CHECK_RUN = 0.9  # seconds one run of the check goes on looking; keepalived starts one a second
SCRIPT_INTERVAL = 1  # keepalived 2.2.7: whole seconds only
SCRIPT_TIMEOUT = 2  # a run slower than this (an overloaded host) counts as failed
FALL = 1  # one failed run takes the instance to FAULT: the address leaves at once
RISE = 2  # two good runs (about 20 looks in 2 s) before a recovered host may hold the address again
# Adverts every 0.1 s leave a busy host little slack: three late ones and the backup takes over while the master
# is healthy.  keepalived's VRRP process runs at this real-time priority, above ordinary work.
VRRP_RT_PRIORITY = 50
DEFAULT_ROUTER_ID = 51
DEFAULT_ADVERT_INT = 0.1
DEFAULT_SCRIPTS_DIR = PurePosixPath("/etc/keepalived/fyrehose")

_INTERFACE = re.compile(r"[A-Za-z0-9_.-]{1,15}")
_SAFE_PATH = re.compile(r"/[A-Za-z0-9_./+-]*")  # needs no quoting in keepalived.conf
_AUTH_PASS = re.compile(r"[A-Za-z0-9_.,:+=@%^*/~-]{1,8}")


@dataclass(frozen=True)
class KeepalivedHost:
    """One host of the pair, as keepalived sees it.  Raises :class:`InputError` for settings keepalived would refuse.

    ``vip`` is the service address with its prefix length, ``src`` this host's
    address on ``interface`` and ``peer`` the other host's: VRRP adverts go
    between the two, unicast.  The two hosts' members differ only in ``src``,
    ``peer`` and ``priority`` (the higher takes the address when both start
    together).  ``auth_pass`` means VRRPv2, whose adverts come in whole seconds
    (VRRPv3, the default, has sub-second adverts and no authentication).
    """

    vip: IPv4Interface
    interface: str
    src: IPv4Address
    peer: IPv4Address
    priority: int
    state_dir: PurePosixPath
    scripts_dir: PurePosixPath = DEFAULT_SCRIPTS_DIR
    router_id: int = DEFAULT_ROUTER_ID
    advert_int: float = DEFAULT_ADVERT_INT
    auth_pass: str | None = None

    def __post_init__(self) -> None:
        if not _INTERFACE.fullmatch(self.interface):
            raise InputError(f"--interface {self.interface!r} is not an interface name "
                             "(1-15 letters, digits, '_', '.', '-')")
        if self.src == self.peer:
            raise InputError(f"--src and --peer are both {self.src}: the peer is the other host")
        if self.vip.ip in (self.src, self.peer):
            raise InputError(f"--vip {self.vip.ip} is a host's own address; the service address must be a third one")
        if not 1 <= self.priority <= 254:
            raise InputError(f"--priority {self.priority} is outside 1-254 (255 would claim to own the address)")
        if not 1 <= self.router_id <= 255:
            raise InputError(f"--router-id {self.router_id} is outside 1-255")
        if not self.state_dir.is_absolute():
            raise InputError(f"--state-dir {self.state_dir} is not an absolute path (keepalived's scripts run in /)")
        if not _SAFE_PATH.fullmatch(str(self.scripts_dir)):
            raise InputError(f"--scripts-dir {self.scripts_dir} must be an absolute path of letters, digits and "
                             "'_./+-' only (it is written unquoted into keepalived.conf)")
        self._check_advert_int()

    def _check_advert_int(self) -> None:
        if self.auth_pass is None:
            hundredths = round(self.advert_int * 100)
            if not 1 <= hundredths <= 4095 or abs(hundredths - self.advert_int * 100) > 1e-6:
                raise InputError(f"--advert-int {self.advert_int:g}: VRRPv3 counts it in hundredths of a second, "
                                 "0.01 to 40.95")
            return
        if not _AUTH_PASS.fullmatch(self.auth_pass):
            raise InputError("--auth-pass must be 1-8 letters, digits or '_.,:+=@%^*/~-'")
        if self.advert_int != int(self.advert_int) or not 1 <= self.advert_int <= 255:
            raise InputError(f"--advert-int {self.advert_int:g} with --auth-pass: authentication needs VRRPv2, "
                             "whose adverts come every 1-255 whole seconds (VRRPv3 has none)")

    @property
    def vrrp_version(self) -> int:
        return 2 if self.auth_pass is not None else 3

    def script(self, name: str) -> PurePosixPath:
        return self.scripts_dir / name


def render_config(member: KeepalivedHost) -> str:
    """The whole keepalived.conf of ``member``'s host."""
    lines = [
        "# keepalived.conf of one host of a fyrehose backbone pair (`fyrehose keepalived`).",
        "# The other host's differs only in unicast_src_ip, unicast_peer and priority.",
        "global_defs {",
        "    script_user root",
        "    enable_script_security",
        f"    vrrp_rt_priority {VRRP_RT_PRIORITY}",
        "}",
        "",
        f"vrrp_script {HEALTH} {{",
        f"    script {member.script(CHECK)}",
        f"    interval {SCRIPT_INTERVAL}",
        f"    timeout {SCRIPT_TIMEOUT}",
        f"    fall {FALL}",
        f"    rise {RISE}",
        "}",
        "",
        f"vrrp_instance {INSTANCE} {{",
        "    state BACKUP",
        "    nopreempt",
        f"    interface {member.interface}",
        f"    virtual_router_id {member.router_id}",
        f"    priority {member.priority}",
        f"    version {member.vrrp_version}",
        f"    advert_int {member.advert_int:g}",
        f"    unicast_src_ip {member.src}",
        "    unicast_peer {",
        f"        {member.peer}",
        "    }",
        "    virtual_ipaddress {",
        f"        {member.vip}",
        "    }",
    ]
    if member.auth_pass is not None:
        lines += ["    authentication {", "        auth_type PASS", f"        auth_pass {member.auth_pass}", "    }"]
    lines += [
        "    track_script {",
        f"        {HEALTH}",
        "    }",
        f"    notify_master {member.script(PROMOTE)}",
        f"    notify_backup {member.script(DEMOTE)}",
        f"    notify_fault {member.script(DEMOTE)}",
        f"    notify_stop {member.script(DEMOTE)}",
        "}",
    ]
    return "\n".join(lines) + "\n"


def render_scripts(member: KeepalivedHost) -> dict[str, str]:
    """The scripts the configuration names, by file name: the health check, promote and demote."""
    state_dir = shlex.quote(str(member.state_dir))
    seen = shlex.quote(str(member.script(SEEN)))
    return {CHECK: _check(state_dir, seen), PROMOTE: _signal(state_dir, "USR1", "notify_master", "promote to primary"),
            DEMOTE: _signal(state_dir, "USR2", "notify_backup, notify_fault and notify_stop", "demote to standby")}


def _check(state_dir: str, seen: str) -> str:
    run_cs = round(CHECK_RUN * 100)
    return f"""#!/bin/sh
# keepalived's health check of the fyrehose backbone in {state_dir} (`fyrehose keepalived`).
# Healthy: the pid in pid is alive and not stopped, and role says primary or standby.
# keepalived runs this once a second (its shortest interval); it looks every
# {LOOK_EVERY:g} s for {CHECK_RUN:g} s and exits 1 at the first bad look, 0 after the last good one.
# A pid other than the one the last look saw (kept in {seen}, outside the state
# directory) fails one look: the backbone restarted, perhaps between two looks and
# with its state directory lost, and must not keep this host's address as a standby.
state_dir={state_dir}
seen={seen}
{{ read -r last < "$seen"; }} 2>/dev/null || last=

healthy() {{
    {{ read -r pid < "$state_dir/pid" && read -r role < "$state_dir/role"; }} 2>/dev/null || return 1
    case $pid in ''|*[!0-9]*) return 1 ;; esac
    if [ "$pid" != "$last" ]; then
        echo "$pid" > "$seen" || return 1
        restarted=$last
        last=$pid
        [ -z "$restarted" ] || return 1
    fi
    case $role in primary|standby) ;; *) return 1 ;; esac
    state=
    {{ while read -r key state _; do
        [ "$key" = State: ] && break
    done < "/proc/$pid/status"; }} 2>/dev/null || return 1
    case $state in T|t|Z|X|'') return 1 ;; esac
}}

# now: /proc/uptime in hundredths of a second ("12345.67" -> 1234567), without a subshell
clock() {{
    read -r uptime _ < /proc/uptime
    now=${{uptime%.*}}${{uptime#*.}}
}}

clock
deadline=$((now + {run_cs}))
while healthy; do
    clock
    [ "$now" -ge "$deadline" ] && exit 0
    sleep {LOOK_EVERY:g}
done
exit 1
"""


def _signal(state_dir: str, signal: str, hooks: str, meaning: str) -> str:
    return f"""#!/bin/sh
# keepalived's {hooks} for the fyrehose backbone in {state_dir}
# (`fyrehose keepalived`): SIG{signal} to the pid in pid, {meaning}.  Without a
# backbone there is nobody to tell: exit 0 quietly.
state_dir={state_dir}
{{ read -r pid < "$state_dir/pid"; }} 2>/dev/null || exit 0
case $pid in ''|*[!0-9]*) exit 0 ;; esac
kill -{signal} "$pid" 2>/dev/null
exit 0
"""
