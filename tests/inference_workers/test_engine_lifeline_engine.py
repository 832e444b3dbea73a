"""A real Celery worker with the real vLLM engine, its main process killed with SIGKILL: no process of its engine
(vLLM's ``EngineCore`` and ``Worker``) outlives it, and a restarted worker builds a fresh engine. Run under
``flock /tmp/engine.lock`` like every engine test: it builds two engines, one after the other."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from bench.lib.processes import celery_worker_argv, child_env, wait_worker_heartbeat
from inference_workers.engine.lifeline import engine_processes, orphaned_engine_processes, owner_token
from tests.inference_workers.test_engine_lifeline import running, wait_gone
from tests.inference_workers.vllm_worker import LOG_PATH, ROOT, stop_process

pytestmark = [pytest.mark.engine, pytest.mark.django_db(transaction=True)]


@contextmanager
def engine_worker_process(name: str) -> Iterator[subprocess.Popen[bytes]]:
    env = child_env(
        ENGINE_BACKEND="vllm",
        ENGINE_MAX_NUM_SEQS="2",
        ENGINE_MAX_MODEL_LEN="1024",
        ENGINE_KV_CACHE_GIB="1",
        ENGINE_DTYPE="float32",
        ENGINE_ENFORCE_EAGER="true",
        WORKER_METRICS_PORT="0",
    )
    log_path = LOG_PATH.with_name(f"lifeline-{name.split('@')[0]}.log")
    log_path.parent.mkdir(exist_ok=True)
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            celery_worker_argv(name=name, concurrency=2), cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT
        )
    try:
        wait_worker_heartbeat(name, proc, timeout_s=300, what=f"the worker {name} (log: {log_path})")
        yield proc
    finally:
        stop_process(proc)


def test_a_sigkilled_workers_engine_dies_with_it_and_a_restart_builds_a_fresh_one(clean_redis: Any) -> None:
    with engine_worker_process("lifeline-a@test") as first:
        engine = engine_processes(owner=owner_token(first.pid))
        assert any("EngineCore" in p.name for p in engine), engine  # vLLM's engine core, marked with its worker
        resident = sum(p.rss_bytes for p in engine)

        first.kill()  # SIGKILL: no shutdown code runs in the worker
        first.wait(10)

        assert wait_gone([p.pid for p in engine], timeout_s=5) == [], f"{resident / 1e9:.1f} GB left running"
        assert orphaned_engine_processes() == []

    with engine_worker_process("lifeline-b@test") as second:
        fresh = engine_processes(owner=owner_token(second.pid))
        assert any("EngineCore" in p.name for p in fresh)
        assert not {p.pid for p in fresh} & {p.pid for p in engine}
        stop_process(second)  # a warm shutdown ends its engine too
        assert wait_gone([p.pid for p in fresh], timeout_s=10) == []
        assert not any(running(p.pid) for p in fresh)
