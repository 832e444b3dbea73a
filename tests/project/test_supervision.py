"""``make run``'s processes under supervisord (deploy/supervisord.conf): one that is killed comes back, and the
others keep serving meanwhile. Simulated engine (this is about the processes, not the model)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.lib.processes import ROOT, child_env, free_port, stop_process_group, wait_http
from generation.worker_contract import worker_heartbeats

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]


class Supervised:
    def __init__(self, run_dir: Path, env: dict[str, str], port: int) -> None:
        self.run_dir, self.env, self.port = run_dir, env, port

    def pid(self, program: str) -> int:
        done = subprocess.run(
            [str(ROOT / ".venv" / "bin" / "supervisorctl"), "-c", "deploy/supervisord.conf", "pid", program],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            timeout=30,
        )
        return int(done.stdout.decode().strip() or 0)

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=2) as response:
                return response.status == 200
        except (urllib.error.URLError, OSError):
            return False


@pytest.fixture
def supervised(tmp_path: Path) -> Iterator[Supervised]:
    port = free_port()
    env = child_env(
        PORT=str(port),
        FLOWER_PORT=str(free_port()),
        FLOWER_BASIC_AUTH="ops:test-pass",
        SUPERVISOR_RUN_DIR=str(tmp_path),
        ENGINE_BACKEND="simulated",
        ENGINE_MAX_NUM_SEQS="4",
        WORKER_METRICS_PORT="0",
        WORKER_NAME=f"supervised-{port}@test",
        WORKER_HEARTBEAT_TTL_S="3",
    )
    log = (ROOT / "artifacts" / "stack-logs").resolve()
    log.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(
        [str(ROOT / ".venv" / "bin" / "supervisord"), "-c", "deploy/supervisord.conf"],
        cwd=ROOT,
        env=env,
        stdout=(log / "supervisord.log").open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        wait_http(f"http://127.0.0.1:{port}/readyz", proc, timeout_s=120, what="supervisord's web")
        yield Supervised(tmp_path, env, port)
    finally:
        stop_process_group(proc, grace_s=40)


def _wait(predicate: object, *, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


def test_a_killed_worker_or_web_comes_back_and_the_rest_keeps_running(supervised: Supervised) -> None:
    name = supervised.env["WORKER_NAME"]
    _wait(lambda: any(b.worker == name for b in worker_heartbeats()), timeout_s=120, what="the worker's heartbeat")
    worker, web, dispatcher = (supervised.pid(p) for p in ("worker", "web", "dispatcher"))
    assert worker and web and dispatcher

    os.kill(worker, signal.SIGKILL)
    # The web keeps answering while the worker is down and restarting (before: the whole stack stopped).
    for _ in range(6):
        assert supervised.healthy()
        time.sleep(0.5)
    _wait(lambda: supervised.pid("worker") not in (0, worker), timeout_s=30, what="a new worker process")
    _wait(lambda: any(b.worker == name for b in worker_heartbeats()), timeout_s=120, what="the new worker's heartbeat")
    assert supervised.pid("web") == web and supervised.pid("dispatcher") == dispatcher

    os.kill(web, signal.SIGKILL)
    _wait(lambda: supervised.pid("web") not in (0, web) and supervised.healthy(), timeout_s=60, what="the web")
    assert supervised.pid("dispatcher") == dispatcher
