"""CPU seconds per process of this machine, grouped by the role the process plays in a served index.

Why: on a machine whose cores are shared by the replicas, Ray's proxy and its own services, the graph server and
the load generator, the questions per second that two replicas reach over one depend on what everything besides
the replicas costs. Read from ``/proc/PID/stat`` (user + system time) before and after a load level.
"""

from __future__ import annotations

import os
from pathlib import Path

#: Substrings of a process's command line, in the order they are tried, and the role they mean.
ROLES = (
    ("ray::ServeReplica", "replicas"),
    ("ray::ProxyActor", "Ray proxy"),
    ("ray::ServeController", "Ray Serve controller"),
    ("falkordb", "graph server"),
    ("redis-server", "graph server"),
    ("ray", "Ray (other)"),
)
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _cpu_and_command(pid_dir: Path) -> tuple[float, str] | None:
    try:
        stat = (pid_dir / "stat").read_text()
        command = (pid_dir / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS, command


def snapshot() -> dict[int, tuple[float, str]]:
    """CPU seconds and command line of every process that can be read (an empty dict off Linux)."""
    out: dict[int, tuple[float, str]] = {}
    proc = Path("/proc")
    if not proc.is_dir():
        return out
    for entry in proc.iterdir():
        if entry.name.isdigit() and (read := _cpu_and_command(entry)) is not None:
            out[int(entry.name)] = read
    return out


def role_of(pid: int, command: str, client_pid: int) -> str:
    if pid == client_pid:
        return "load generator"
    for needle, role in ROLES:
        if needle in command:
            return role
    return "other"


def cpu_by_role(before: dict[int, tuple[float, str]], after: dict[int, tuple[float, str]]) -> dict[str, float]:
    """CPU seconds each role used between two snapshots (processes that started meanwhile count from zero)."""
    used: dict[str, float] = {}
    client = os.getpid()
    for pid, (cpu, command) in after.items():
        spent = cpu - before.get(pid, (0.0, ""))[0]
        if spent > 0:
            role = role_of(pid, command, client)
            used[role] = used.get(role, 0.0) + spent
    return dict(sorted(used.items(), key=lambda kv: -kv[1]))
