"""CPU seconds and memory per process of this machine, from ``/proc``; grouped by the role a process plays in a
served index.

Why: on a machine whose cores are shared by the replicas, Ray's proxy and its own services, the graph server and
the load generator, the questions per second that two replicas reach over one depend on what everything besides
the replicas costs. Read from ``/proc/PID/stat`` (user + system time) before and after a load level. The scale
runs read the same table for a build's process tree (`evals.studies.scale.run`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
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
_PAGE_KIB = os.sysconf("SC_PAGE_SIZE") // 1024 if hasattr(os, "sysconf") else 4


@dataclass(frozen=True)
class ProcessStat:
    """One process as ``/proc/PID/stat`` gives it."""

    ppid: int
    rss_kib: int
    cpu_s: float
    """User + system seconds of the process itself."""
    children_cpu_s: float
    """User + system seconds of its children that it waited for."""
    command: str = ""


def _stat_of(pid_dir: Path, command: bool) -> ProcessStat | None:
    try:
        stat = (pid_dir / "stat").read_bytes()
        line = (pid_dir / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace") if command else ""
        fields = stat.rsplit(b")", 1)[1].split()
        return ProcessStat(ppid=int(fields[1]), rss_kib=int(fields[21]) * _PAGE_KIB,
                           cpu_s=(int(fields[11]) + int(fields[12])) / _TICKS,
                           children_cpu_s=(int(fields[13]) + int(fields[14])) / _TICKS, command=line)  # fmt: skip
    except (OSError, IndexError, ValueError):  # gone meanwhile, or not a process's stat line
        return None


def processes(command: bool = False) -> dict[int, ProcessStat]:
    """Every process that can be read, with its command line when ``command`` (an empty dict off Linux)."""
    out: dict[int, ProcessStat] = {}
    proc = Path("/proc")
    if not proc.is_dir():
        return out
    for entry in proc.iterdir():
        if entry.name.isdigit() and (read := _stat_of(entry, command)) is not None:
            out[int(entry.name)] = read
    return out


def snapshot() -> dict[int, tuple[float, str]]:
    """CPU seconds and command line of every process that can be read."""
    return {pid: (stat.cpu_s, stat.command) for pid, stat in processes(command=True).items()}


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
