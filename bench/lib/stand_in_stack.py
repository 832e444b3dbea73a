"""The serving path on the stand-in engine at a GPU's shape: one web process (uvicorn), the dispatcher and one
Celery worker, as ``make run`` starts them, on a database and Redis databases of the bench's own.

The engine is the stand-in (``ENGINE_BACKEND=simulated``, :mod:`inference_workers.engine.simulated`): ``slots``
running sequences, each making ``rate`` tokens/s (a step of ``1 / rate`` s whatever the batch), prefill free. It does
almost nothing per token, so what the processes spend is the serving path's own cost. Used by
``bench/serving_ceiling.py`` (the ceiling under load) and ``bench/ttft_hops.py`` (a lone request, hop by hop).
"""

from __future__ import annotations

import resource
import subprocess
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bench.lib import proc_cpu
from bench.lib.stack import PY, ROOT, ensure_database, flush_redis, set_moderation, setup_django, spawn


@dataclass(frozen=True)
class StandInConfig:
    """Where the stack keeps its state and the stand-in engine's shape."""

    database_url: str
    redis_url: str
    broker_url: str
    slots: int = 256
    """The stand-in engine's running sequences (``max_num_seqs``), and the worker's threads."""
    rate: float = 40.0
    """Tokens/s of each running sequence."""
    moderation: bool = False
    """The pro tier's moderation passes as shipped (the prompt and the streamed answer), or neither."""
    lifecycle_log: bool = False
    """The processes log at ``INFO`` (as shipped: each run's lifecycle records, ``runs.lifecycle_log``), not only
    warnings; the logs are JSON lines either way."""


@dataclass
class Stack:
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    meters: dict[str, Callable[[], float]] = field(default_factory=dict)
    """CPU seconds so far of each process (``proc_cpu.snapshot`` reads them), the client's included."""
    base_url: str = ""


def stand_in_env(config: StandInConfig) -> dict[str, str]:
    """The stand-in engine in a GPU's shape: ``slots`` sequences at ``rate`` tokens/s each, free prefill."""
    return {
        "ENGINE_BACKEND": "simulated",
        "ENGINE_MAX_NUM_SEQS": str(config.slots),
        "ENGINE_MAX_MODEL_LEN": "4096",
        "SIM_STEP_BASE_S": str(1 / config.rate),
        "SIM_STEP_PER_SEQ_S": "0",
        "SIM_PREFILL_PER_TOKEN_S": "0",
    }


def prepare(config: StandInConfig) -> None:
    """This process set up for the stack: its environment (the stand-in engine's too, for the children), the
    database created and migrated, both Redis databases flushed, Django, the default tiers and the moderation
    passes of ``config``."""
    setup_django(  # (Django connects to nothing yet: the database is made ready next)
        DATABASE_URL=config.database_url,
        REDIS_URL=config.redis_url,
        CELERY_BROKER_URL=config.broker_url,
        **stand_in_env(config),
    )
    ensure_database(config.database_url)
    flush_redis(config.redis_url)
    flush_redis(config.broker_url)
    from accounts.models import Tier
    from accounts.tier_defaults import seed_default_tiers

    seed_default_tiers(Tier)
    set_moderation(on=config.moderation)


def start_stack(config: StandInConfig, logs: Path, *, prefix: str = "ceiling") -> Stack:
    """Starts the three processes (logs ``<logs>/<prefix>-web.log`` and so on) and waits until they serve."""
    from bench.lib.processes import celery_worker_argv, child_env, free_port, wait_http, wait_worker_heartbeat

    env = child_env(
        DJANGO_SETTINGS_MODULE="chatproject.settings.base",
        DATABASE_URL=config.database_url,
        REDIS_URL=config.redis_url,
        CELERY_BROKER_URL=config.broker_url,
        LOG_LEVEL="INFO" if config.lifecycle_log else "WARNING",
        LOG_FORMAT="json",
        CHAT_AFFINITY="false",
        WORKER_METRICS_PORT="0",
        **stand_in_env(config),
    )
    port = free_port()
    web_cmd = [
        *(str(ROOT / ".venv" / "bin" / "uvicorn"), "chatproject.asgi:application", "--host", "127.0.0.1"),
        *("--port", str(port), "--no-access-log", "--log-level", "warning"),
    ]
    web_log, dispatcher_log, worker_log = (logs / f"{prefix}-{name}.log" for name in ("web", "dispatcher", "worker"))
    web = spawn(web_cmd, env, web_log)
    dispatcher = spawn([PY, "manage.py", "run_dispatcher"], env, dispatcher_log)
    name = f"{prefix}-{uuid.uuid4().hex[:6]}@bench"
    worker = spawn(celery_worker_argv(name=name, concurrency=config.slots, events=True), env, worker_log)
    stack = Stack(procs=[web, dispatcher, worker], base_url=f"http://127.0.0.1:{port}")
    try:
        wait_http(f"{stack.base_url}/healthz", web, timeout_s=300, what=f"the web process (log: {web_log})")
        wait_worker_heartbeat(name, worker, timeout_s=300, what=f"the worker (log: {worker_log})")
        if dispatcher.poll() is not None:
            raise SystemExit(f"the dispatcher exited; see {dispatcher_log}")
    except BaseException:
        stop_stack(stack)
        raise
    stack.meters = {
        "web": proc_cpu.own_seconds(web.pid),
        "worker": proc_cpu.own_seconds(worker.pid),
        "dispatcher": proc_cpu.own_seconds(dispatcher.pid),
        "redis-server": proc_cpu.named_seconds("redis-server"),
        "postgres (cluster)": proc_cpu.named_seconds("postgres", with_reaped=True),
        "client": client_seconds,
    }
    return stack


def client_seconds() -> float:
    """vLLM's benchmark client (a child ``python -c`` process that imports ``vllm.benchmarks.serve``): its CPU while
    it lives, plus every reaped child's, so a window that ends after it exited still counts its whole share."""
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    live = sum(
        s.own_s
        for s in proc_cpu.all_stats()
        if s.comm.startswith("python") and "vllm.benchmarks" in proc_cpu.cmdline(s.pid)
    )
    return reaped.ru_utime + reaped.ru_stime + live


def stop_stack(stack: Stack) -> None:
    from bench.lib.processes import stop_process_group

    for proc in reversed(stack.procs):
        stop_process_group(proc, grace_s=20)
