"""The real stack for end-to-end tests: a uvicorn web process, a Celery worker (simulated engine) and the
dispatcher, on the test database and Redis, started once per test package that uses ``live_stack``.

The tests using it are transactional, so those processes see every row the test writes. Process logs land
in ``artifacts/stack-logs/``. A package's conftest imports the fixtures it needs from here.
"""

from __future__ import annotations

import itertools
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import get_commands

from bench.lib.processes import celery_worker_argv, stop_process_group, test_database_url, wait_http

ROOT = Path(__file__).resolve().parents[1]
LOGS = ROOT / "artifacts" / "stack-logs"
LABEL = "stack"
_stack_numbers = itertools.count(1)
PORT_RANGE = range(int(os.environ.get("UI_TEST_PORT", "8160")), int(os.environ.get("UI_TEST_PORT", "8160")) + 10)

# The simulated engine, slowed down so that text visibly grows for a few seconds.
SIMULATED_ENGINE_ENV = {
    "ENGINE_BACKEND": "simulated",
    "SIM_STEP_BASE_S": os.environ.get("UI_SIM_STEP_BASE_S", "0.08"),
    "SIM_STEP_PER_SEQ_S": "0.0",
    "SIM_OUTPUT_TOKENS": os.environ.get("UI_SIM_OUTPUT_TOKENS", "80"),
    "STREAM_FLUSH_INTERVAL_S": "0.05",
    "STREAM_FLUSH_MAX_TOKENS": "2",
}


@dataclass
class LiveStack:
    base_url: str
    processes: dict[str, subprocess.Popen[bytes]]

    def url(self, path: str) -> str:
        return self.base_url + path


def _free_port() -> int:
    for port in PORT_RANGE:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {PORT_RANGE}")


# The real engine (vLLM with SmolLM2 on the CPU), as the engine tests build it: small, eager, float32.
REAL_ENGINE_ENV = {
    "ENGINE_BACKEND": "vllm",
    "ENGINE_MAX_NUM_SEQS": "8",
    "ENGINE_MAX_MODEL_LEN": "2048",
    "ENGINE_KV_CACHE_GIB": "1",
    "ENGINE_DTYPE": "float32",
    "ENGINE_ENFORCE_EAGER": "true",
    "STREAM_FLUSH_INTERVAL_S": "0.05",
}


def _stack_env(engine_env: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_ALLOW_ASYNC_UNSAFE"}
    env.update(engine_env)
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": "chatproject.settings.test",
            "DATABASE_URL": test_database_url(),
            "REDIS_URL": settings.REDIS_URL,
            "CELERY_BROKER_URL": settings.CELERY_BROKER_URL,
            # Tasks of this stack stay between its dispatcher and its worker, even when another test module
            # keeps a worker of its own on the same broker database.
            "CELERY_BROKER_KEY_PREFIX": f"{LABEL}-{os.getpid()}:",
            "PYTHONUNBUFFERED": "1",
            # Tests register versions and expect the web to route to them at once (production: 2 s and 1 s).
            "DEPLOYMENT_CACHE_S": "0.2",
            "DEPLOYMENT_WORKERS_CACHE_S": "0.2",
        }
    )
    return env


def _spawn(name: str, argv: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    LOGS.mkdir(parents=True, exist_ok=True)
    log = (LOGS / f"{LABEL}-{name}.log").open("wb")
    # A process group of its own, so teardown stops exactly what this fixture started.
    return subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def _wait_log(name: str, proc: subprocess.Popen[bytes], marker: str, timeout_s: float) -> None:
    path = LOGS / f"{LABEL}-{name}.log"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{name} process exited with {proc.returncode}; see {path}")
        if marker in path.read_text(errors="replace"):
            return
        time.sleep(0.3)
    raise RuntimeError(f"{name} did not log {marker!r} within {timeout_s} s; see {path}")


def _warm_up(base_url: str, *, with_worker: bool) -> None:
    """One prompt through the whole stack before the tests: the web process loads the tokenizer on first
    use (seconds on a small CPU) and the worker its engine; no test should pay for that in its timeouts."""
    from rest_framework.authtoken.models import Token

    from runs.models import TERMINAL_STATUSES, Run
    from tests.factories import ChatFactory, UserFactory

    user = UserFactory.create(username=f"{LABEL}-warm-up")
    chat = ChatFactory.create(owner=user)
    token = Token.objects.create(user=user)
    request = urllib.request.Request(
        f"{base_url}/api/chats/{chat.pk}/messages",
        data=json.dumps({"content": "warm up", "max_tokens": 4}).encode(),
        headers={"Authorization": f"Token {token.key}", "Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            run_id = json.load(response)["run"]["id"]
        deadline = time.monotonic() + 60
        while with_worker and time.monotonic() < deadline:
            if Run.objects.filter(pk=run_id, status__in=TERMINAL_STATUSES).exists():
                break
            time.sleep(0.2)
    finally:
        user.delete()


def _worker_argv(suffix: str = "") -> list[str] | None:
    """The worker command, once the worker app exists (see inference_workers); ``suffix`` tells apart the
    Celery node names of a stack's workers."""
    try:
        import inference_workers.tasks  # noqa: F401
    except ImportError:
        return None
    return celery_worker_argv(name=f"{LABEL}-{os.getpid()}{suffix}@%h", concurrency=4)


@pytest.fixture(scope="package", name="live_stack")
def live_stack_fixture(django_db_setup: None, django_db_blocker: object) -> Iterator[LiveStack]:
    yield from run_live_stack(django_db_blocker, engine_env=SIMULATED_ENGINE_ENV)


def web_argv(port: int) -> list[str]:
    """One uvicorn web process of the project on loopback ``port``, quiet but for warnings."""
    app = ["chatproject.asgi:application", "--host", "127.0.0.1", "--port", str(port)]
    return [str(ROOT / ".venv" / "bin" / "uvicorn"), *app, "--log-level", "warning"]


def run_live_stack(
    django_db_blocker: object,
    *,
    engine_env: dict[str, str],
    worker_ready_s: float = 90,
    workers: dict[str, dict[str, str]] | None = None,
) -> Generator[LiveStack, None, None]:
    """Starts web, worker (with ``engine_env``) and dispatcher; yields the stack; stops them.

    ``workers``: several worker processes instead of the one, each under its name (process ``worker-NAME``, log
    ``LABEL-worker-NAME.log``) with its own environment over ``engine_env`` (``WORKER_DEPLOYMENT``,
    ``SIM_FAIL_RATE``...). Deployments they serve must be committed before the call."""
    global LABEL
    LABEL = f"stack{next(_stack_numbers)}-{os.getpid()}"  # the pid: two sessions in one tree keep their own logs
    from accounts.models import Tier
    from accounts.tier_defaults import seed_default_tiers
    from tests.deployment_helpers import ensure_default_deployment

    with django_db_blocker.unblock():  # type: ignore[attr-defined]
        seed_default_tiers(Tier)  # earlier transactional tests flush every table; the dispatcher reads tiers at start
        ensure_default_deployment(mark_worker=False)  # the worker serves it only once it is ready
    env = _stack_env(engine_env)
    port = _free_port()
    processes: dict[str, subprocess.Popen[bytes]] = {}
    try:
        processes["web"] = _spawn("web", web_argv(port), env)
        # (process name, node-name suffix, environment) of each worker: the one, or those of ``workers``.
        worker_specs = (
            [("worker", "", env)]
            if workers is None
            else [(f"worker-{name}", f"-{name}", {**env, **extra}) for name, extra in workers.items()]
        )
        worker_names: list[str] = []
        for process_name, suffix, worker_env in worker_specs:
            argv = _worker_argv(suffix)
            if argv:
                processes[process_name] = _spawn(process_name, argv, worker_env)
                worker_names.append(process_name)
        if worker_names:
            if "run_dispatcher" in get_commands():
                # Admitted runs wait in the scheduler's queues until the dispatcher hands them to Celery.
                processes["dispatcher"] = _spawn(
                    "dispatcher", [sys.executable, str(ROOT / "manage.py"), "run_dispatcher"], env
                )
        base_url = f"http://127.0.0.1:{port}"
        wait_http(base_url + "/healthz", processes["web"], timeout_s=90, what=f"the web process ({LOGS})")
        for name in worker_names:
            _wait_log(name, processes[name], "ready.", timeout_s=worker_ready_s)
        with django_db_blocker.unblock():  # type: ignore[attr-defined]
            _warm_up(base_url, with_worker=bool(worker_names))
        yield LiveStack(base_url=base_url, processes=processes)
    finally:
        for proc in processes.values():
            stop_process_group(proc)
        _drop_broker_keys(env["CELERY_BROKER_KEY_PREFIX"])


def _drop_broker_keys(prefix: str) -> None:
    """Removes this stack's (prefixed) broker keys: bindings and any task left unconsumed."""
    import redis

    client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    keys = list(client.scan_iter(match=f"{prefix}*", count=500))
    if keys:
        client.delete(*keys)


@pytest.fixture(scope="package", name="has_worker")
def has_worker_fixture(live_stack: LiveStack) -> bool:
    return "worker" in live_stack.processes


@pytest.fixture(name="needs_worker")
def needs_worker_fixture(has_worker: bool) -> None:
    if not has_worker:
        pytest.skip("no Celery worker with the simulated engine in this checkout yet")


@pytest.fixture(autouse=True, name="settle_runs")
def settle_runs_fixture(request: pytest.FixtureRequest) -> Iterator[None]:
    """Cancels what a test left running and waits for the worker to let go of it, so no answer is still
    being written into the next test's (flushed) tables and Redis."""
    yield
    if "live_stack" not in request.fixturenames:
        return
    from runs.models import ACTIVE_STATUSES, Run
    from runs.services import run_cancel

    for run in Run.objects.filter(status__in=ACTIVE_STATUSES):
        run_cancel(run=run)
    deadline = time.monotonic() + 15
    while Run.objects.filter(status__in=ACTIVE_STATUSES).exists() and time.monotonic() < deadline:
        time.sleep(0.2)
