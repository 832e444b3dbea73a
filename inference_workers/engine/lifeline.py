"""The engine's processes die with the worker that started them, and a starting worker reaps any that did not.

vLLM runs its engine core in a child process (``multiprocessing``; spawned on CPU hosts), which starts its own
``Worker`` children. A worker's main process killed with SIGKILL runs none of vLLM's shutdown code, and those
processes used to live on under PID 1 (about 4.5 GB resident each time, on CPU). Two guards:

- **tied children** (:func:`tied_children`): while the engine is built, every process started through
  ``multiprocessing`` runs :func:`set_parent_death_signal` first: the kernel SIGKILLs it when its parent dies.
  The child ties its own children the same way, so vLLM's ``Worker`` dies with its engine core, which dies with
  the worker. (The signal follows the parent *thread*: the engine is built on the engine host's loop thread,
  which lives as long as the engine.)
- **a marker** (:data:`OWNER_ENV`): those processes carry ``CHAT_ENGINE_OWNER=<pid>:<start time>`` of the worker
  process in their environment. :func:`reap_orphaned_engines`, run before a worker builds its engine, SIGKILLs
  every marked process whose owner is gone (a child whose parent died before it set its signal, an engine of a
  build without these guards). A marked process whose owner lives is never touched: it is another worker's.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import logging
import multiprocessing
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from multiprocessing.context import ForkProcess, SpawnProcess
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

OWNER_ENV = "CHAT_ENGINE_OWNER"
"""The environment variable that marks an engine process with its worker: ``<pid>:<start time in ticks>``."""

_PR_SET_PDEATHSIG = 1
PROC = Path("/proc")


def set_parent_death_signal(sig: int = signal.SIGKILL) -> bool:
    """Asks the kernel to send ``sig`` to this process when its parent (thread) dies: ``prctl(PR_SET_PDEATHSIG)``.
    False where there is no such call (not Linux)."""
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"prctl(PR_SET_PDEATHSIG): {os.strerror(errno)}")
    return True


def _run_tied(parent_pid: int, target: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """A tied child's first steps: the death signal, then (the parent may have died before it was set) a check
    that the parent is still the one that started it; then its own children are tied, and the target runs."""
    set_parent_death_signal()
    if os.getppid() != parent_pid:
        os.kill(os.getpid(), signal.SIGKILL)
    _tie(multiprocessing.get_context("spawn"), _TiedSpawnProcess)
    _tie(multiprocessing.get_context("fork"), _TiedForkProcess)
    return target(*args, **kwargs)


def _tied_target(target: Callable[..., Any] | None) -> Callable[..., Any] | None:
    # A partial of module-level functions pickles by reference: a spawned child imports this module to run it.
    return None if target is None else functools.partial(_run_tied, os.getpid(), target)


class _TiedSpawnProcess(SpawnProcess):
    def __init__(self, group: None = None, target: Callable[..., Any] | None = None, *args: Any, **kw: Any) -> None:
        super().__init__(group, _tied_target(target), *args, **kw)


class _TiedForkProcess(ForkProcess):
    def __init__(self, group: None = None, target: Callable[..., Any] | None = None, *args: Any, **kw: Any) -> None:
        super().__init__(group, _tied_target(target), *args, **kw)


def _tie(context: Any, process_class: type) -> None:
    # The contexts are module-level singletons (what vLLM's get_mp_context() returns): an attribute set on the
    # instance shadows the class's Process for every caller in this process.
    context.Process = process_class


@contextlib.contextmanager
def tied_children(*, owner: str | None = None) -> Iterator[None]:
    """Within the block, processes started through ``multiprocessing`` (spawn or fork) die with their parent and
    carry ``owner`` (:func:`owner_token` of this process by default) in :data:`OWNER_ENV`. Only the block's own
    children are marked: the variable is restored afterwards."""
    contexts: list[tuple[Any, type]] = [
        (multiprocessing.get_context("spawn"), _TiedSpawnProcess),
        (multiprocessing.get_context("fork"), _TiedForkProcess),
    ]
    previous = os.environ.get(OWNER_ENV)
    os.environ[OWNER_ENV] = owner or owner_token(os.getpid())
    for context, process_class in contexts:
        _tie(context, process_class)
    try:
        yield
    finally:
        for context, _ in contexts:
            with contextlib.suppress(AttributeError):
                del context.Process  # the class's own again
        if previous is None:
            os.environ.pop(OWNER_ENV, None)
        else:
            os.environ[OWNER_ENV] = previous


# -- finding and reaping orphans --------------------------------------------------------------------------------


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (``/proc/PID/stat`` field 22); None if it is gone."""
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces: count fields after its closing one.
    return stat.rsplit(")", 1)[1].split()[19]


def owner_token(pid: int) -> str:
    """``<pid>:<start time>``: names one process, never a later one that reuses its pid."""
    return f"{pid}:{_start_time(pid)}"


def owner_alive(token: str) -> bool:
    pid, _, started = token.partition(":")
    return pid.isdigit() and _start_time(int(pid)) == started


@dataclass(frozen=True)
class EngineProcess:
    pid: int
    owner: str
    """The :data:`OWNER_ENV` value: the worker process that started it."""
    name: str
    rss_bytes: int


def _marker(pid: int) -> str | None:
    try:
        environ = (PROC / str(pid) / "environ").read_bytes()
    except OSError:  # gone, or another user's
        return None
    prefix = OWNER_ENV.encode() + b"="
    for entry in environ.split(b"\0"):
        if entry.startswith(prefix):
            return entry[len(prefix) :].decode(errors="replace")
    return None


def _rss_bytes(pid: int) -> int:
    try:
        pages = int((PROC / str(pid) / "statm").read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return 0
    return pages * os.sysconf("SC_PAGE_SIZE")


def engine_processes(*, owner: str | None = None) -> list[EngineProcess]:
    """Every live process marked as an engine process (of ``owner`` only, if given), from ``/proc``."""
    found = []
    for entry in PROC.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        marker = _marker(int(entry.name))
        if marker is None or (owner is not None and marker != owner):
            continue
        try:
            name = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        state = _state(int(entry.name))
        if state in ("Z", "X", None):  # a zombie holds no memory; its parent reaps it
            continue
        found.append(
            EngineProcess(pid=int(entry.name), owner=marker, name=name[:80], rss_bytes=_rss_bytes(int(entry.name)))
        )
    return found


def _state(pid: int) -> str | None:
    try:
        return (PROC / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def orphaned_engine_processes() -> list[EngineProcess]:
    """The engine processes whose worker is gone."""
    return [p for p in engine_processes() if not owner_alive(p.owner)]


def reap_orphaned_engines(*, wait_s: float = 5.0) -> list[EngineProcess]:
    """SIGKILLs every engine process whose worker is gone and waits (up to ``wait_s``) for them to vanish;
    returns them. Engines of live workers are left alone."""
    orphans = orphaned_engine_processes()
    for orphan in orphans:
        logger.warning(
            "killing an orphaned engine process: pid %s (%s, %.1f GB resident) of the dead worker %s",
            orphan.pid,
            orphan.name,
            orphan.rss_bytes / 1e9,
            orphan.owner,
        )
        with contextlib.suppress(ProcessLookupError):
            os.kill(orphan.pid, signal.SIGKILL)
    deadline = time.monotonic() + wait_s
    while orphans and time.monotonic() < deadline and any(_state(o.pid) not in ("Z", "X", None) for o in orphans):
        time.sleep(0.05)
    return orphans
