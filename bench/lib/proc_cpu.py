"""CPU seconds of processes from ``/proc/<pid>/stat`` (user + system time), for a bench's per-process accounting.

A process's own ``utime + stime`` covers all its threads but none of its children, so a Celery worker's own figure
excludes vLLM's EngineCore child process, which is counted on its own. For a process whose short-lived children
must be counted (the postmaster forks a backend per connection), ``cutime + cstime`` adds the reaped ones.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PROC = Path("/proc")


@dataclass(frozen=True)
class ProcStat:
    pid: int
    comm: str
    ppid: int
    own_s: float
    """utime + stime: every thread of the process, none of its children."""
    reaped_children_s: float
    """cutime + cstime: the children that exited and were waited for."""


def read_stat(pid: int) -> ProcStat | None:
    """The process's figures, or None when it is gone."""
    try:
        raw = (PROC / str(pid) / "stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # The command name is in parentheses and may hold spaces or parentheses itself: split after the last ')'.
    comm = raw[raw.index("(") + 1 : raw.rindex(")")]
    fields = raw[raw.rindex(")") + 2 :].split()
    utime, stime, cutime, cstime = (int(x) for x in fields[11:15])
    return ProcStat(pid, comm, int(fields[1]), (utime + stime) / CLOCK_TICKS, (cutime + cstime) / CLOCK_TICKS)


def all_stats() -> list[ProcStat]:
    stats = []
    for entry in PROC.iterdir():
        if entry.name.isdigit() and (stat := read_stat(int(entry.name))) is not None:
            stats.append(stat)
    return stats


def cmdline(pid: int) -> str:
    try:
        return (PROC / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return ""


def descendants(pid: int, stats: Iterable[ProcStat] | None = None) -> list[ProcStat]:
    """Every live process below ``pid`` (children, their children...)."""
    by_parent: dict[int, list[ProcStat]] = {}
    for stat in stats if stats is not None else all_stats():
        by_parent.setdefault(stat.ppid, []).append(stat)
    found, todo = [], [pid]
    while todo:
        for child in by_parent.get(todo.pop(), []):
            found.append(child)
            todo.append(child.pid)
    return found


def engine_core_pid(parent: int) -> int | None:
    """vLLM's EngineCore process below ``parent`` (it names itself ``VLLM::EngineCore``), if there is one."""
    for stat in descendants(parent):
        if "EngineCor" in stat.comm or "EngineCore" in cmdline(stat.pid):
            return stat.pid
    return None


def own_seconds(pid: int) -> Callable[[], float]:
    """A meter of one process's own CPU seconds (0 once it is gone)."""

    def meter() -> float:
        stat = read_stat(pid)
        return stat.own_s if stat else 0.0

    return meter


def named_seconds(comm: str, *, with_reaped: bool = False) -> Callable[[], float]:
    """A meter of every process whose command name starts with ``comm`` (a whole Postgres cluster, say), the
    reaped children of those whose parent is not one of them (the postmaster) added when ``with_reaped``."""

    def meter() -> float:
        group = [s for s in all_stats() if s.comm.startswith(comm)]
        pids = {s.pid for s in group}
        total = sum(s.own_s for s in group)
        if with_reaped:
            total += sum(s.reaped_children_s for s in group if s.ppid not in pids)
        return total

    return meter


def snapshot(meters: dict[str, Callable[[], float]]) -> dict[str, float]:
    return {name: meter() for name, meter in meters.items()}


def delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {name: after[name] - before[name] for name in before}
