"""Telling a live owner from a dead or reused PID, on the owner's own Linux host."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from sandbox_ledger.resources.models import LocalProcessIdentity

PROC = Path("/proc")


def _boot_id(proc: Path) -> str | None:
    try:
        return (proc / "sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None


def _pid_namespace(proc: Path) -> str | None:
    try:
        return os.readlink(proc / "self/ns/pid")
    except OSError:
        return None


def process_start_time(pid: int, proc: Path = PROC) -> int | None:
    """Field 22 of /proc/<pid>/stat (start time in clock ticks after boot), None if no such
    process."""
    try:
        stat = (proc / str(pid) / "stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    fields = stat[stat.rindex(")") + 2 :].split()
    return int(fields[19])


def current_identity(proc: Path = PROC) -> LocalProcessIdentity | None:
    """This process's identity, or None outside Linux."""
    boot, namespace = _boot_id(proc), _pid_namespace(proc)
    start = process_start_time(os.getpid(), proc)
    if boot is None or namespace is None or start is None:
        return None
    return LocalProcessIdentity(
        host=socket.gethostname(), boot_id=boot, pid_namespace=namespace, start_time=start
    )


def is_owner_alive(
    identity: LocalProcessIdentity | None, pid: int, proc: Path = PROC
) -> bool | None:
    """True if process ``pid`` is the one ``identity`` describes, False if it is gone or the
    PID now belongs to another process, None when this host cannot tell (no identity, another
    host, another boot, another PID namespace, not Linux)."""
    if identity is None:
        return None
    if identity.host != socket.gethostname():
        return None
    boot = _boot_id(proc)
    if boot is None or boot != identity.boot_id:
        return None
    if str(identity.pid_namespace) != str(_pid_namespace(proc)):
        return None
    start = process_start_time(pid, proc)
    if start is None:
        return False
    return str(start) == str(identity.start_time)
