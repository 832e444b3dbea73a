"""The engine's processes die with the worker that started them (``PR_SET_PDEATHSIG``, set in every child through
``multiprocessing``), and a starting worker reaps those whose worker is gone. Real processes, real signals; the
real engine's version of this is ``test_engine_lifeline_engine.py``."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from inference_workers.engine.lifeline import (
    OWNER_ENV,
    engine_processes,
    orphaned_engine_processes,
    owner_token,
    reap_orphaned_engines,
)

ROOT = Path(__file__).resolve().parents[2]


def running(pid: int) -> bool:
    """Alive and not a zombie (a zombie holds no memory; PID 1 may be slow to reap it)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def wait_gone(pids: list[int], timeout_s: float) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and any(running(p) for p in pids):
        time.sleep(0.05)
    return [p for p in pids if running(p)]


def kill_all(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@contextlib.contextmanager
def process_tree(mode: str) -> Iterator[dict[str, int]]:
    proc = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("tied_tree.py")), mode], cwd=ROOT, stdout=subprocess.PIPE
    )
    pids: dict[str, int] = {}
    try:
        assert proc.stdout is not None
        pids = json.loads(proc.stdout.readline())
        yield pids
    finally:
        proc.kill()
        proc.wait(10)
        kill_all([pid for name, pid in pids.items() if name != "main"])


def test_tied_children_and_grandchildren_die_with_a_sigkilled_parent() -> None:
    with process_tree("tied") as pids:
        owner = owner_token(pids["main"])
        marked = {p.pid for p in engine_processes(owner=owner)}
        # Both carry the worker's marker (and so does multiprocessing's resource tracker, started with the first
        # child); the worker itself does not.
        assert {pids["child"], pids["grandchild"]} <= marked and pids["main"] not in marked

        os.kill(pids["main"], signal.SIGKILL)

        assert wait_gone(sorted(marked), timeout_s=5) == []


def test_untied_children_outlive_a_sigkilled_parent() -> None:
    """The control: without the guard, the kernel leaves them running (what a killed worker's engine did)."""
    with process_tree("untied") as pids:
        os.kill(pids["main"], signal.SIGKILL)
        time.sleep(1.0)
        assert running(pids["child"]) and running(pids["grandchild"])


@pytest.fixture
def marked_sleepers() -> Iterator[dict[str, int]]:
    """Two marked processes: one whose owner is gone (a dead pid's token: this pid with another start time, as
    when a pid is reused), one whose owner lives (this test process)."""
    procs = {
        "orphan": subprocess.Popen(["sleep", "60"], env={**os.environ, OWNER_ENV: f"{os.getpid()}:0"}),
        "owned": subprocess.Popen(["sleep", "60"], env={**os.environ, OWNER_ENV: owner_token(os.getpid())}),
    }
    try:
        yield {name: proc.pid for name, proc in procs.items()}
    finally:
        for proc in procs.values():
            proc.kill()
            proc.wait(5)


def test_the_reaper_kills_orphaned_engines_and_never_a_live_workers(marked_sleepers: dict[str, int]) -> None:
    assert marked_sleepers["orphan"] in {p.pid for p in orphaned_engine_processes()}
    assert marked_sleepers["owned"] not in {p.pid for p in orphaned_engine_processes()}

    reaped = reap_orphaned_engines()

    assert marked_sleepers["orphan"] in {p.pid for p in reaped}
    assert marked_sleepers["owned"] not in {p.pid for p in reaped}
    assert not running(marked_sleepers["orphan"])
    assert running(marked_sleepers["owned"])
