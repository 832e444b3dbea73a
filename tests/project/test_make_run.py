"""``scripts/run.sh`` (what ``make run`` runs after its set-up): it says "ready" only once a worker heartbeats,
and Ctrl-C stops everything it started. Simulated engine: this is about the processes, not the model."""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from bench.lib.processes import ROOT, child_env, free_port
from generation.worker_contract import worker_heartbeats

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]


def _port_open(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def test_run_sh_says_ready_after_a_worker_heartbeat_and_ctrl_c_stops_it_all(tmp_path: Path) -> None:
    port, flower = free_port(), free_port()
    name = f"makerun-{port}@test"
    env = child_env(
        PORT=str(port),
        FLOWER_PORT=str(flower),
        FLOWER_BASIC_AUTH="ops:test-pass",
        SUPERVISOR_RUN_DIR=str(tmp_path),
        ENGINE_BACKEND="simulated",
        ENGINE_MAX_NUM_SEQS="4",
        WORKER_METRICS_PORT="0",
        WORKER_NAME=name,
    )
    proc = subprocess.Popen(
        ["bash", "scripts/run.sh"], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    assert proc.stdout is not None
    lines: list[str] = []
    try:
        deadline = time.monotonic() + 180
        ready_seen_with_worker = None
        while time.monotonic() < deadline and ready_seen_with_worker is None:
            assert proc.poll() is None, "run.sh exited:\n" + "".join(lines[-40:])
            if not select.select([proc.stdout], [], [], 1.0)[0]:
                continue
            line = proc.stdout.readline().decode(errors="replace")
            lines.append(line)
            if line.startswith("ready: "):
                ready_seen_with_worker = any(b.worker == name for b in worker_heartbeats())
        assert ready_seen_with_worker is True, "no 'ready' line, or it came before the worker heartbeated"
        assert any(line.startswith("starting: ") for line in lines)
        assert _port_open(port) and _port_open(flower)
    finally:
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C in the terminal goes to the whole foreground group
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            raise
    deadline = time.monotonic() + 20
    while (_port_open(port) or _port_open(flower)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not _port_open(port) and not _port_open(flower), "a process outlived Ctrl-C"
