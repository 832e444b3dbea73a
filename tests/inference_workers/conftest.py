"""Fixtures and helpers of the worker tests: a worker runtime on the simulated engine in this process, the real
engine's Celery worker (``engine_worker``, shared by the package's engine tests), and waiting on a run's stream."""

from __future__ import annotations

import dataclasses
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.conf import settings

from bench.lib.processes import celery_worker_argv, child_env, wait_worker_heartbeat
from core.config import EngineConfig
from inference_workers.engine.simulated import SimulatedEngine
from inference_workers.runtime import WorkerRuntime
from runs.models import Run
from runs.streaming.contract import TERMINAL_EVENTS, StreamEntry, StreamEvent, read_after
from tests.inference_workers.vllm_worker import (
    LOG_PATH,
    METRICS_PORT,
    METRICS_PUBLISH_S,
    ROOT,
    SLOTS,
    WORKER_NAME,
    stop_process,
)


def fast_sim_config(**overrides: object) -> EngineConfig:
    """The simulated engine with steps short enough for unit tests."""
    fields: dict[str, object] = {
        "backend": "simulated",
        "max_num_seqs": 4,
        "sim_step_base_s": 0.005,
        "sim_step_per_seq_s": 0.001,
        "sim_prefill_per_token_s": 0.0,
        "sim_output_tokens": 12,
    }
    fields.update(overrides)
    return dataclasses.replace(settings.ENGINE, **fields)  # type: ignore[arg-type]


@contextmanager
def running_sim_runtime(worker_name: str = "sim@test") -> Iterator[WorkerRuntime]:
    """A worker runtime in this process on the simulated engine (what a Celery worker process holds)."""
    config = fast_sim_config()
    runtime = WorkerRuntime(
        worker_name=worker_name, engine_config=config, worker_config=settings.WORKERS, engine=SimulatedEngine(config)
    )
    runtime.start()
    try:
        yield runtime
    finally:
        runtime.stop()


@pytest.fixture
def sim_runtime() -> Iterator[WorkerRuntime]:
    with running_sim_runtime() as runtime:
        yield runtime


@pytest.fixture(scope="package")
def engine_worker(django_db_setup: None, django_db_blocker: Any) -> Iterator[str]:
    """``celery worker -P threads`` with the real engine (vLLM, SmolLM2, fp32, eager, 1 GiB KV cache), shared by
    this package's engine tests (``test_worker_engine*.py``; see :mod:`tests.inference_workers.vllm_worker`)."""

    broker_db = settings.CELERY_BROKER_URL.rsplit("/", 1)[-1]
    assert broker_db != "0", "the engine tests flush their broker database: never the dev stack's db 0"
    import redis

    redis.Redis.from_url(settings.CELERY_BROKER_URL).flushdb()  # stale tasks of earlier runs
    log_path = LOG_PATH
    log_path.parent.mkdir(exist_ok=True)
    env = child_env(
        ENGINE_BACKEND="vllm",
        ENGINE_MAX_NUM_SEQS=str(SLOTS),
        ENGINE_MAX_MODEL_LEN="2048",
        ENGINE_KV_CACHE_GIB="1",
        ENGINE_DTYPE="float32",
        ENGINE_ENFORCE_EAGER="true",
        CHAT_AFFINITY="false",
        WORKER_METRICS_PORT=str(METRICS_PORT),
        WORKER_METRICS_PUBLISH_S=str(METRICS_PUBLISH_S),
    )
    cmd = celery_worker_argv(name=WORKER_NAME, concurrency=SLOTS, events=True)
    with log_path.open("wb") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_worker_heartbeat(WORKER_NAME, proc, timeout_s=300, what=f"the engine worker (log: {log_path})")
        yield WORKER_NAME
    finally:
        stop_process(proc)


def wait_for(predicate: Callable[[], bool], *, timeout: float, interval: float = 0.05, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def wait_terminal(run: Run, *, timeout: float) -> Run:
    """Waits until the run is finished in Postgres *and* its stream ends with the terminal event.

    A worker commits the final row first and appends ``done``/``error`` to the stream just after (the event
    carries the new message's id), so a test that only watched Postgres could read the stream in between.
    """

    def finished() -> bool:
        if not Run.objects.get(pk=run.pk).is_terminal:
            return False
        entries = stream_of(run)
        return bool(entries) and entries[-1].event in TERMINAL_EVENTS

    wait_for(finished, timeout=timeout, interval=0.1, what=f"run {run.pk} and its terminal stream event")
    return Run.objects.select_related("assistant_message").get(pk=run.pk)


def text_after_last_reset(entries: list[StreamEntry]) -> str:
    """What an SSE client shows: the deltas since the last ``reset``."""
    text: list[str] = []
    for entry in entries:
        if entry.event == StreamEvent.RESET:
            text.clear()
        elif entry.event == StreamEvent.DELTA:
            text.append(entry.data["text"])
    return "".join(text)


def stream_of(run: Run) -> list[StreamEntry]:
    return read_after(run.pk, 0)
